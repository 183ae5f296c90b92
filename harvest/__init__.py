"""Phase one, on a GPU box: generate sampled responses with vLLM, score them with reward oracles, write pools.

Not implemented yet (tracked as its own issue); the replay side never imports this package.
"""
