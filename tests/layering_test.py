"""The import layering of docs/contributing.md ("Layering"), checked on the AST.

Every import of every module under jaxlab/ counts: module-level and
function-local, `import a.b`, `from a import b`, relative imports, and
`importlib.import_module("jaxlab....")` with a literal name. Two checks:

* no import cycle between modules (one strongly connected component of the
  module graph is one cycle, printed with the lines that close it);
* one direction between packages: a module may import its own package and
  the layers below its own, never a peer in its layer nor a layer above.
  Each violation prints as "a.b imports c.d (layer X -> layer Y)".

And the notebooks (colabs/, their builders included) and benchmarks
(jaxlab/experiments/bench/) import library modules and launch experiments
through `jaxlab.main.run_experiment` (`jaxlab.experiments.run_experiment`):
of `jaxlab.experiments` they import only `main`'s helpers `results`,
`report`, `compile` and the bench package (issue 46's grep).

Fast: it parses files, imports nothing.
"""

import ast
import collections
import glob
import os
import re
import shutil
import tempfile

from absl.testing import absltest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "jaxlab")

# Lowest first; the packages of one tier are peers (neither imports the
# other). A module's layer is `jaxlab.<X>` (a top-level module such as
# `jaxlab.registry` is its own layer), except `jaxlab.data.synthetic`, the
# generators, a layer of their own so that the trainer (their peer) cannot
# import them. docs/contributing.md writes the same table.
LAYERS = (
    ("jaxlab", "registry", "_optional", "plotting", "progress", "parallel"),
    ("nn",),
    ("decoding",),
    ("models", "data"),
    ("io",),
    ("train", "data.synthetic"),
    ("evals",),
    ("objectives",),
    ("rl", "rewards", "compression", "analysis", "testing"),
    ("configs",),
    ("experiments",),
    ("main",),
)
TIER = {name: i for i, names in enumerate(LAYERS) for name in names}


def module_files(package_dir: str = PACKAGE) -> dict[str, str]:
  """Dotted module name -> file, for every .py under `package_dir`."""
  out = {}
  base = os.path.dirname(package_dir)
  for dirpath, dirnames, filenames in os.walk(package_dir):
    dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
    for f in sorted(filenames):
      if f.endswith(".py"):
        path = os.path.join(dirpath, f)
        name = os.path.relpath(path, base)[:-3].replace(os.sep, ".")
        out[name.removesuffix(".__init__")] = path
  return out


def layer(module: str) -> str:
  parts = module.split(".")
  if len(parts) == 1:
    return parts[0]
  if parts[1] == "data" and len(parts) > 2 and parts[2] == "synthetic":
    return "data.synthetic"
  return parts[1]


def imports(modules: dict[str, str]) -> dict[str, list[tuple[str, int]]]:
  """module -> [(imported jaxlab module, line)], all imports of its file."""

  def resolve(name: str) -> str | None:
    while name and name not in modules:
      name = name.rpartition(".")[0]
    return name or None

  out = collections.defaultdict(list)
  for module, path in modules.items():
    with open(path, encoding="utf-8") as f:
      tree = ast.parse(f.read(), path)
    package = (module if path.endswith("__init__.py")
               else module.rpartition(".")[0])
    for node in ast.walk(tree):
      targets = []
      if isinstance(node, ast.Import):
        targets = [a.name for a in node.names]
      elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
          parts = package.split(".")
          parts = parts[:len(parts) - (node.level - 1)]
          base = ".".join(parts + ([base] if base else []))
        # `from a import b`: the module a.b when it is one, else a.
        targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules
                   else base for a in node.names]
      elif (isinstance(node, ast.Call) and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and ((isinstance(node.func, ast.Attribute)
                  and node.func.attr == "import_module")
                 or (isinstance(node.func, ast.Name)
                     and node.func.id in ("import_module", "__import__")))):
        targets = [node.args[0].value]
      for t in targets:
        if t == "jaxlab" or t.startswith("jaxlab."):
          target = resolve(t)
          if target and target != module:
            out[module].append((target, node.lineno))
  return out


# Issue 46's must-show: `grep -rnE "<this>" colabs jaxlab/experiments/bench`.
EXPERIMENT_IMPORT = re.compile(
    r"from jaxlab.experiments import ([a-z_]+) as|"
    r"from jaxlab.experiments.([a-z_]+) import")
# What a notebook or benchmark may import of `jaxlab.experiments`.
EXPERIMENT_IMPORTS_ALLOWED = ("results", "report", "compile", "bench")


def experiment_imports(paths) -> list[str]:
  """"path:line: text" of each line of `paths` that imports a module of
  `jaxlab.experiments` other than `EXPERIMENT_IMPORTS_ALLOWED` the way the
  grep finds it (`from jaxlab.experiments import X as Y`, `from
  jaxlab.experiments.X import ...`)."""
  bad = []
  for path in paths:
    with open(path, encoding="utf-8") as f:
      for i, line in enumerate(f, 1):
        for m in EXPERIMENT_IMPORT.finditer(line):
          if (m.group(1) or m.group(2)) not in EXPERIMENT_IMPORTS_ALLOWED:
            bad.append(f"{os.path.relpath(path, ROOT)}:{i}: "
                       f"{line.strip()}")
  return bad


def notebook_and_bench_files() -> list[str]:
  """Every file of colabs/ and jaxlab/experiments/bench/ (`grep -r`)."""
  out = []
  for top in ("colabs", os.path.join("jaxlab", "experiments", "bench")):
    for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, top)):
      dirnames[:] = [d for d in dirnames if d != "__pycache__"]
      out += [os.path.join(dirpath, f) for f in sorted(filenames)
              if not f.endswith(".pyc")]
  return sorted(out)


def layering_violations(graph) -> list[str]:
  bad = set()
  for module, targets in graph.items():
    a = layer(module)
    for target, _ in targets:
      b = layer(target)
      if a == b:
        continue
      if a not in TIER or b not in TIER:
        bad.add(f"{module} imports {target} (layer {a} -> layer {b}: "
                f"{a if a not in TIER else b} is in no layer of LAYERS)")
      elif TIER[b] >= TIER[a]:
        bad.add(f"{module} imports {target} (layer {a} -> layer {b})")
  return sorted(bad)


def cycles(graph) -> list[str]:
  """One line per strongly connected component of > 1 module (Tarjan)."""
  edges = {m: sorted({t for t, _ in ts}) for m, ts in graph.items()}
  index, low, stack, on_stack, comps = {}, {}, [], set(), []
  counter = [0]

  def visit(v):  # iterative enough for a package of a few hundred modules
    index[v] = low[v] = counter[0]
    counter[0] += 1
    stack.append(v)
    on_stack.add(v)
    for w in edges.get(v, ()):
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in on_stack:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      comp = []
      while True:
        w = stack.pop()
        on_stack.discard(w)
        comp.append(w)
        if w == v:
          break
      if len(comp) > 1:
        comps.append(sorted(comp))

  for v in sorted(edges):
    if v not in index:
      visit(v)
  out = []
  for comp in sorted(comps):
    members = set(comp)
    lines = [f"{m}:{line} imports {t}" for m in comp
             for t, line in sorted(set(graph[m])) if t in members]
    out.append("import cycle between " + ", ".join(comp) + ": "
               + "; ".join(lines))
  return out


class LayeringTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.modules = module_files()
    cls.graph = imports(cls.modules)

  def test_every_package_has_a_layer(self):
    missing = sorted({layer(m) for m in self.modules} - set(TIER))
    self.assertEqual(missing, [], "add these to LAYERS and to "
                     "docs/contributing.md's Layering")

  def test_no_import_cycles(self):
    found = cycles(self.graph)
    print("\n".join(found))
    self.assertEqual(found, [])

  def test_one_direction_between_packages(self):
    found = layering_violations(self.graph)
    print("\n".join(found))
    self.assertEqual(found, [])

  def test_notebooks_and_benchmarks_import_no_experiment(self):
    files = notebook_and_bench_files()
    # The grep covers the notebooks, their builders and every benchmark.
    names = {os.path.relpath(p, ROOT) for p in files}
    for must in ("colabs/dpad.ipynb", "colabs/_build_dpad_colab.py",
                 "jaxlab/experiments/bench/dpad.py",
                 "jaxlab/experiments/bench/kv_compression.py"):
      self.assertIn(must, names)
    found = experiment_imports(files)
    print("\n".join(found))
    self.assertEqual(found, [])
    # Each notebook that runs an experiment does it through the launcher's
    # runner, not an experiment module's `run`.
    for path in glob.glob(os.path.join(ROOT, "colabs", "*.ipynb")):
      with open(path, encoding="utf-8") as f:
        text = f.read()
      if "get_config(PRESET)" in text:
        self.assertTrue(
            re.search(r"\.run_experiment\(config, [a-zA-Z_]+\)", text),
            f"{os.path.basename(path)} runs no experiment through "
            "jaxlab.main.run_experiment")

  def test_the_experiment_import_check_sees_each_form(self):
    tmp = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
    path = os.path.join(tmp, "nb.ipynb")
    with open(path, "w") as f:
      f.write('"from jaxlab.experiments import dpad as dpad_exp\\n",\n'
              "from jaxlab.experiments.speckv import held_out\n"
              "from jaxlab.experiments import results as results_lib\n"
              "from jaxlab.experiments.bench import roofline\n"
              "from jaxlab import main as launcher\n")
    found = experiment_imports([path])
    self.assertLen(found, 2)
    self.assertIn(":1: ", found[0])
    self.assertIn("dpad as dpad_exp", found[0])
    self.assertIn(":2: from jaxlab.experiments.speckv import", found[1])

  def test_the_doc_writes_the_same_layers(self):
    with open(os.path.join(ROOT, "docs", "contributing.md")) as f:
      doc = f.read()
    section = doc.split("## Layering", 1)[1].split("\n## ", 1)[0]
    for i, names in enumerate(LAYERS):
      row = f"| {i} | " + ", ".join(f"`{n}`" for n in names) + " |"
      self.assertIn(row, section)

  def test_the_checker_sees_every_kind_of_import(self):
    # A checker that misses function-local or relative imports would pass
    # vacuously: the current tree has each kind, resolved as written.
    edges = {(m, t) for m, ts in self.graph.items() for t, _ in ts}
    # module-level `from jaxlab.models import decoder as decoder_lib`
    self.assertIn(("jaxlab.models.registry", "jaxlab.models.decoder"), edges)
    # function-local (inside a function body)
    self.assertIn(("jaxlab.train.trainer", "jaxlab.io.pretrained"), edges)
    # `from jaxlab import registry` is the module jaxlab.registry
    self.assertIn(("jaxlab.data.pipeline", "jaxlab.registry"), edges)
    # relative, function-local and importlib imports of a written package
    tmp = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
    pkg = os.path.join(tmp, "jaxlab", "models")
    os.makedirs(pkg)
    for name, text in {
        "__init__.py": "", "../__init__.py": "", "b.py": "",
        "c.py": "", "d.py": "",
        "a.py": ("import importlib\n"
                 "def f():\n  from . import b\n  from .c import X\n"
                 "  importlib.import_module('jaxlab.models.d')\n")}.items():
      with open(os.path.join(pkg, name), "w") as f:
        f.write(text)
    got = imports(module_files(os.path.join(tmp, "jaxlab")))
    self.assertEqual(sorted(got["jaxlab.models.a"]),
                     [("jaxlab.models.b", 3), ("jaxlab.models.c", 4),
                      ("jaxlab.models.d", 5)])
    self.assertEqual(layer("jaxlab.data.synthetic.facts"), "data.synthetic")
    self.assertEqual(
        layering_violations({"jaxlab.data.c": [("jaxlab.models.a", 3)]}),
        ["jaxlab.data.c imports jaxlab.models.a (layer data -> layer "
         "models)"])
    self.assertEqual(
        layering_violations({"jaxlab.nn.x": [("jaxlab.decoding.y", 1)]}),
        ["jaxlab.nn.x imports jaxlab.decoding.y (layer nn -> layer "
         "decoding)"])
    self.assertEqual(layering_violations(
        {"jaxlab.models.a": [("jaxlab.data.c", 1)]}),
                     ["jaxlab.models.a imports jaxlab.data.c (layer models "
                      "-> layer data)"])
    self.assertEqual(layering_violations(
        {"jaxlab.train.t": [("jaxlab.data.synthetic.facts", 1)]}),
                     ["jaxlab.train.t imports jaxlab.data.synthetic.facts "
                      "(layer train -> layer data.synthetic)"])
    self.assertEqual(layering_violations(
        {"jaxlab.evals.e": [("jaxlab.data.synthetic.facts", 1)]}), [])
    self.assertEqual(
        cycles({"jaxlab.models.a": [("jaxlab.models.b", 7)],
                "jaxlab.models.b": [("jaxlab.models.a", 9)]}),
        ["import cycle between jaxlab.models.a, jaxlab.models.b: "
         "jaxlab.models.a:7 imports jaxlab.models.b; "
         "jaxlab.models.b:9 imports jaxlab.models.a"])


if __name__ == "__main__":
  absltest.main()
