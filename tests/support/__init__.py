"""Helpers the tests share (pools, fake backends, tiny models, comparisons): imported as `support.<module>`, never
from a sibling test module (tests/test_layering.py checks). tests/ is on sys.path because pytest puts a rootdir-less
conftest's folder there (its default "prepend" import mode); subprocesses a test starts insert it themselves."""
