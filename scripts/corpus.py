"""Fetch the real-model corpus (realbench.corpus): `python scripts/corpus.py fetch [--all] [ENTRY ...]`,
`python scripts/corpus.py list`."""
import sys

from realbench.corpus import main

if __name__ == "__main__":
    sys.exit(main())
