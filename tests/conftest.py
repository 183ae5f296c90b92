import sys
from pathlib import Path

# tests/naive.py (the plain-Python reference) is imported by name.
sys.path.insert(0, str(Path(__file__).parent))
