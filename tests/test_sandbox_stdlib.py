"""The standard library works inside the sandbox, at both levels (issue 13).

The sandbox's runner is started with -S -s (no site-packages, .pth files or sitecustomize), so nothing this machine's
interpreter or venv preloads reaches a program; the programs below also drop each module from sys.modules before
importing it, so the runner's own PRELOAD cannot hide a module whose import is broken either (random.py calls
os.register_at_fork when imported, which the guard used to disable: every program importing random, tempfile,
statistics, secrets or uuid was graded failed in a fresh venv)."""
import pytest

from ttc.harvest.oracles.sandbox import PRELOAD, isolation, run_many

# module -> a use of it that must work (module-level names: the program imports each afresh first)
USES = {
    "random": "r = random.Random(1); assert r.randint(1, 6) in range(1, 7); random.shuffle(l := [1, 2, 3])",
    "tempfile": "with tempfile.TemporaryDirectory() as d:\n    open(d + '/f', 'w').write('x')\n"
                "with tempfile.NamedTemporaryFile('w') as f: f.write('y')",
    "statistics": "assert statistics.median([3, 1, 2]) == 2 and statistics.stdev([1, 2, 3]) == 1",
    "collections": "c = collections.Counter('abca'); assert c['a'] == 2; d = collections.deque([1]); d.appendleft(0)",
    "heapq": "h = [3, 1, 2]; heapq.heapify(h); assert heapq.heappop(h) == 1",
    "bisect": "assert bisect.bisect_left([1, 2, 4], 3) == 2",
    "itertools": "assert list(itertools.permutations('ab')) == [('a', 'b'), ('b', 'a')]",
    "functools": "f = functools.lru_cache(None)(lambda n: n * 2); assert f(3) == 6",
    "math": "assert math.comb(5, 2) == 10 and math.isqrt(17) == 4",
    "fractions": "assert fractions.Fraction(1, 3) * 3 == 1",
    "decimal": "assert decimal.Decimal('0.1') * 3 == decimal.Decimal('0.3')",
    "re": "assert re.findall(r'\\d+', 'a1b22') == ['1', '22']",
    "string": "assert string.ascii_lowercase[:3] == 'abc'",
    "datetime": "assert datetime.date(2024, 3, 1) - datetime.timedelta(days=1) == datetime.date(2024, 2, 29)",
    "typing": "T = typing.TypeVar('T'); x: typing.List[int] = [1]",
    "dataclasses": "@dataclasses.dataclass(order=True)\nclass P:\n    x: int\nassert P(1) < P(2)",
    "json": "assert json.loads(json.dumps({'a': [1]})) == {'a': [1]}",
    "secrets": "assert len(secrets.token_hex(8)) == 16",
    "uuid": "assert uuid.uuid4().version == 4",
    "operator": "assert operator.itemgetter(1)([5, 6]) == 6",
    "copy": "a = [[1]]; b = copy.deepcopy(a); b[0].append(2); assert a == [[1]]",
    "array": "assert array.array('i', [1, 2]).tolist() == [1, 2]",
    "enum": "class C(enum.Enum):\n    A = 1\nassert C(1) is C.A",
    "hashlib": "assert hashlib.sha256(b'x').hexdigest()[:4] == '2d71'",
    "cmath": "assert abs(cmath.sqrt(-1) - 1j) < 1e-12",
    "numbers": "assert isinstance(3, numbers.Integral)",
    "textwrap": "assert textwrap.wrap('a b c', 3) == ['a b', 'c']",
    "unicodedata": "assert unicodedata.name('a') == 'LATIN SMALL LETTER A'",
    "struct": "assert struct.unpack('<I', struct.pack('<I', 7)) == (7,)",
    "time": "assert time.time() > 0 and time.perf_counter() >= 0",
    "calendar": "assert calendar.isleap(2024)",
    "queue": "q = queue.PriorityQueue(); q.put(2); q.put(1); assert q.get() == 1",
    "threading": "t = threading.Thread(target=lambda: None); t.start(); t.join()",
    "ast": "assert ast.literal_eval('[1, (2, 3)]') == [1, (2, 3)]",
    "base64": "assert base64.b64decode(base64.b64encode(b'hi')) == b'hi'",
    "pprint": "assert pprint.pformat({'a': 1}) == \"{'a': 1}\"",
    "binascii": "assert binascii.hexlify(b'a') == b'61'",
    "zlib": "assert zlib.decompress(zlib.compress(b'x' * 100)) == b'x' * 100",
    "io": "s = io.StringIO(); s.write('x'); assert s.getvalue() == 'x'",
    "contextlib": "with contextlib.suppress(KeyError): {}['x']",
    "abc": "class A(abc.ABC):\n    @abc.abstractmethod\n    def f(self): ...",
    "types": "assert types.SimpleNamespace(a=1).a == 1",
    "weakref": "class O: pass\no = O(); r = weakref.ref(o); assert r() is o",
    "pathlib": "p = pathlib.Path('d'); p.mkdir(); (p / 'f').write_text('x'); assert (p / 'f').read_text() == 'x'",
    "csv": "assert list(csv.reader(['a,b'])) == [['a', 'b']]",
    "sqlite3": "c = sqlite3.connect(':memory:'); assert c.execute('select 1').fetchone() == (1,)",
    "difflib": "assert difflib.SequenceMatcher(None, 'ab', 'ab').ratio() == 1.0",
    "shutil": "open('a', 'w').write('x'); shutil.copy('a', 'b'); assert open('b').read() == 'x'",
    "glob": "open('g.txt', 'w').close(); assert glob.glob('*.txt') == ['g.txt']",
    "traceback": "assert 'x' in traceback.format_exception_only(ValueError('x'))[0]",
    "inspect": "assert inspect.isfunction(lambda: 0)",
    "warnings": "warnings.warn('w')",
    "logging": "logging.getLogger('x').warning('logged')",
}


def _fresh(module: str) -> str:
    """Forget the module (and its submodules: a fresh package must get them afresh too), then import it."""
    return (f"for _k in [k for k in sys.modules if k == {module!r} or k.startswith({module + '.'!r})]:\n"
            f"    del sys.modules[_k]\n"
            f"import {module}\n")


def _program(module: str, use: str) -> str:
    return ("import sys\n"
            "assert sys.flags.no_site and sys.flags.no_user_site and 'site' not in sys.modules, 'site was loaded'\n"
            + _fresh(module) + use + "\n")


def test_every_preloaded_module_has_a_use_here():
    assert {m for m in PRELOAD if "." not in m} - set(USES) <= {"resource", "select", "signal", "subprocess"}


@pytest.mark.parametrize("sandbox", ["auto", "guard"])
def test_standard_library_imports_afresh_and_works(sandbox):
    names = sorted(USES)
    out = run_many([_program(m, USES[m]) for m in names], workers=2, timeout_s=20, sandbox=sandbox)
    failed = {m: (r.status, r.detail[-300:]) for m, r in zip(names, out) if not r.passed}
    assert not failed
    assert {r.level for r in out} == {isolation(sandbox)}


def test_every_stdlib_module_in_one_program():
    """All of them in one interpreter, each imported afresh, as a real solution's imports would be."""
    body = "import sys\n" + "".join(_fresh(m) + USES[m] + "\n" for m in sorted(USES))
    r = run_many([body], timeout_s=30)[0]
    assert r.passed, r.detail


def test_site_packages_are_not_importable():
    """Only the standard library: what this machine has installed (numpy here) cannot change a verdict."""
    import importlib.util

    third_party = next((m for m in ("numpy", "polars", "pytest") if importlib.util.find_spec(m)), None)
    if third_party is None:  # pragma: no cover - the test extra installs pytest
        pytest.skip("no third-party package installed to try")
    r = run_many([f"import {third_party}\n"], timeout_s=20)[0]
    assert r.status == "failed" and "ModuleNotFoundError" in r.detail, r
