"""The retrieval set with ground truth that MiniLM is judged on (scripts/calibrate_embedding_limits.py,
and the transformer case): Python standard-library docstrings, shipped with the
interpreter, nothing downloaded. For every public function, class and method of MODULES whose docstring
has a summary paragraph (5-40 words, not a call signature) and a body (>= 12 words): query = the
summary, document = the body; duplicates are dropped and the first `count` by SHA-1 of the qualified
name are kept, so one Python version always gives the same set. Texts are tokenized as MiniLM's
export takes them (its tokenizer, truncated and padded to SEQ tokens)."""
from __future__ import annotations

import hashlib
import importlib
import inspect
import re
import warnings
from typing import Dict, Iterator, List, Tuple

import numpy as np

SEQ = 32  # bench_real_models.transformer's length: the exported graph's fixed sequence axis
MODULES = (
    "argparse ast asyncio.base_events asyncio.events asyncio.streams asyncio.tasks base64 bisect calendar cmd codecs "
    "collections concurrent.futures._base configparser contextlib copy csv dataclasses datetime decimal difflib dis "
    "doctest email.message email.utils enum fileinput fnmatch fractions ftplib functools getopt gettext glob gzip "
    "hashlib heapq hmac html.parser http.client http.cookiejar http.server imaplib importlib.abc importlib.resources "
    "inspect ipaddress json.decoder json.encoder locale logging logging.handlers lzma mailbox mimetypes "
    "multiprocessing.pool multiprocessing.queues netrc ntpath numbers operator optparse os pathlib pdb pickle "
    "pickletools pkgutil platform plistlib poplib posixpath pprint profile pstats queue quopri random re reprlib "
    "sched secrets selectors shelve shlex shutil smtplib socket socketserver sqlite3.dbapi2 ssl statistics string "
    "subprocess sysconfig tarfile tempfile textwrap threading timeit tokenize trace traceback typing unittest.case "
    "unittest.mock urllib.parse urllib.request uuid warnings wave weakref xml.dom.minidom xml.etree.ElementTree "
    "zipfile zipimport asyncio.futures asyncio.locks asyncio.queues asyncio.selector_events asyncio.subprocess "
    "asyncio.transports asyncio.protocols asyncio.unix_events codeop compileall concurrent.futures.process "
    "concurrent.futures.thread email.feedparser email.headerregistry email.parser email.policy email._policybase "
    "filecmp graphlib importlib.metadata importlib.util modulefinder multiprocessing.connection "
    "multiprocessing.managers multiprocessing.process multiprocessing.synchronize pyclbr rlcompleter runpy symtable "
    "tabnanny tracemalloc unittest.loader unittest.result unittest.runner unittest.suite urllib.robotparser "
    "wsgiref.handlers wsgiref.headers wsgiref.simple_server xml.sax.handler xml.sax.saxutils xml.sax.xmlreader "
    "xmlrpc.client xmlrpc.server zipapp code bdb cProfile colorsys dbm.dumb nturl2path opcode pty stringprep "
    "struct tty").split()


def _documented(module) -> Iterator[Tuple[str, object]]:
    for name, obj in sorted(vars(module).items()):
        if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
            continue
        if inspect.isfunction(obj) or inspect.isclass(obj):
            yield f"{module.__name__}.{name}", obj
        if inspect.isclass(obj):
            for attr, member in sorted(vars(obj).items()):
                if inspect.isfunction(member) and not attr.startswith("_"):
                    yield f"{module.__name__}.{name}.{attr}", member


def _summary_and_body(doc: str):
    paragraphs = [p for p in re.split(r"\n\s*\n", inspect.cleandoc(doc)) if p.strip()]
    if len(paragraphs) < 2 or ">>>" in paragraphs[1]:
        return None
    summary, body = " ".join(paragraphs[0].split()), " ".join(" ".join(paragraphs[1:]).split())
    if not 5 <= len(summary.split()) <= 40 or len(body.split()) < 12 or re.match(r"^[\w.]+\(", summary):
        return None
    return summary, body


def docstring_pairs(count: int) -> List[Tuple[str, str, str]]:
    """(qualified name, summary, body) of `count` stdlib docstrings, the same on every run of one Python version."""
    found, seen = [], set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for module_name in MODULES:
            for qualname, obj in _documented(importlib.import_module(module_name)):
                split = _summary_and_body(obj.__doc__ or "")
                if split is None or split[0].lower() in seen or split[1].lower() in seen:
                    continue
                seen.update(text.lower() for text in split)
                found.append((qualname, *split))
    found.sort(key=lambda pair: hashlib.sha1(pair[0].encode()).hexdigest())
    if len(found) < count:
        raise SystemExit(f"only {len(found)} docstring pairs on this Python, asked for {count}")
    return found[:count]


def tokenize(texts: List[str]) -> Dict[str, np.ndarray]:
    from tokenizers import Tokenizer

    from realbench.corpus import corpus_file

    tok = Tokenizer.from_file(str(corpus_file("minilm", "tokenizer")))
    tok.enable_truncation(SEQ)
    tok.enable_padding(pad_id=0, pad_token="[PAD]", length=SEQ)
    enc = tok.encode_batch(texts)
    return {"input_ids": np.array([e.ids for e in enc], np.int64),
            "attention_mask": np.array([e.attention_mask for e in enc], np.int64),
            "token_type_ids": np.array([e.type_ids for e in enc], np.int64)}


def recall_at_1(queries: np.ndarray, documents: np.ndarray) -> np.ndarray:
    """Per query, whether its own document (same row) is the nearest by cosine."""
    q = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    d = documents / np.linalg.norm(documents, axis=1, keepdims=True)
    return (q @ d.T).argmax(axis=1) == np.arange(len(q))


def nearest_neighbours(embeddings: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Each row's nearest other row by cosine, and its lead over the runner-up."""
    x = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
    sim = x @ x.T
    np.fill_diagonal(sim, -np.inf)
    order = np.argsort(-sim, 1)
    rows = np.arange(len(x))
    return order[:, 0], sim[rows, order[:, 0]] - sim[rows, order[:, 1]]
