"""Declared dependencies are exactly what jaxlab/ imports.

An AST walk over every module of jaxlab/ collects its third-party imports and
maps each to its distribution with `importlib.metadata.packages_distributions()`
(a module that is not installed here maps to its own name). The rules:

* a module-level or lazy (in-function) import of shared code needs a core
  dependency ([project] dependencies);
* an optional capability is imported through `_optional.require(module,
  extra)`, and that extra must declare the module's distribution;
* an import inside `try: ... except ImportError` is a probe: the code runs
  without it, but its distribution must still be declared (core or an extra);
* jaxlab/testing/ and jaxlab/experiments/bench/ are test and benchmark tools
  (`make test`, `make bench` install the `test` extra): core or `test`;
* every core dependency is imported by shared code (or listed in
  `CORE_NOT_IMPORTED` with the reason), and every capability extra's by
  some module, so nothing unused is declared.

pyproject.toml is read directly (tomllib), not the installed metadata, so
the test sees the checkout's declarations.
"""

import ast
import functools
from importlib import metadata
import os
import re
import sys
import tomllib

from absl.testing import absltest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "jaxlab")
# Code run only by `make test` / `make bench` (the `test` extra).
TEST_ONLY = ("jaxlab/testing/", "jaxlab/experiments/bench/")
# Core dependencies no module of shared code imports by name, and why they
# are core: what transformers.AutoTokenizer (jaxlab/data/hf_tokenizer.py)
# needs for a checkpoint's tokenizer but does not itself require.
CORE_NOT_IMPORTED = {
    "tokenizers": "transformers' fast tokenizers: a checkpoint's "
                  "tokenizer.json (also jaxlab.testing's fixtures)",
    "jinja2": "transformers renders chat templates with it but does not "
              "declare it",
}
# Extra dependencies that are plugins or runtimes, never imported by name.
EXTRA_NOT_IMPORTED = {
    "imageio-ffmpeg": "imageio's ffmpeg plugin (mp4 in [video])",
}


def normalize(name: str) -> str:
  """PEP 503 distribution name."""
  return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(spec: str) -> tuple[str, tuple[str, ...]]:
  """"jax[tpu]>=0.7" -> ("jax", ("tpu",))."""
  m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?", spec)
  extras = tuple(e.strip() for e in (m.group(2) or "").split(",")
                 if e.strip())
  return normalize(m.group(1)), extras


@functools.cache
def pyproject() -> dict:
  with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
    return tomllib.load(f)


@functools.cache
def declared() -> tuple[frozenset, dict]:
  """(core distributions, extra -> distributions), self-references expanded
  (`jaxlab[video,audio]` in an extra adds those extras' distributions)."""
  project = pyproject()["project"]
  core = frozenset(requirement_name(s)[0] for s in project["dependencies"])
  raw = project.get("optional-dependencies", {})

  def expand(extra, seen=()):
    out = set()
    for spec in raw[extra]:
      name, extras = requirement_name(spec)
      if name == normalize(project["name"]):
        for e in extras:
          if e not in seen:
            out |= expand(e, seen + (extra,))
      else:
        out.add(name)
    return out

  return core, {e: frozenset(expand(e)) for e in raw}


@functools.cache
def module_to_dist() -> dict:
  return {m: [normalize(d) for d in ds]
          for m, ds in metadata.packages_distributions().items()}


def dists_of(top: str) -> list[str]:
  return module_to_dist().get(top) or [normalize(top)]


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
  names = []
  if isinstance(handler.type, ast.Name):
    names = [handler.type.id]
  elif isinstance(handler.type, ast.Tuple):
    names = [e.id for e in handler.type.elts if isinstance(e, ast.Name)]
  return bool({"ImportError", "ModuleNotFoundError"} & set(names))


def _is_require(node: ast.Call) -> bool:
  f = node.func
  return ((isinstance(f, ast.Attribute) and f.attr == "require"
           and isinstance(f.value, ast.Name) and f.value.id == "_optional")
          or (isinstance(f, ast.Name) and f.id == "require"))


@functools.cache
def third_party_imports():
  """[(file, line, module, kind, extra)]; kind: top | lazy | probe | require."""
  stdlib = sys.stdlib_module_names
  out = []
  for dirpath, _, files in os.walk(PACKAGE):
    for filename in sorted(files):
      if not filename.endswith(".py"):
        continue
      path = os.path.join(dirpath, filename)
      rel = os.path.relpath(path, ROOT).replace(os.sep, "/")
      with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
      parents = {}
      for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
          parents[child] = node

      def kind_of(node):
        child, node = node, parents.get(node)
        kind = "top"
        while node is not None:
          if isinstance(node, ast.Try) and child in node.body and any(
              _catches_import_error(h) for h in node.handlers):
            return "probe"
          if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                               ast.Lambda)):
            kind = "lazy"
          child, node = node, parents.get(node)
        return kind

      for node in ast.walk(tree):
        if isinstance(node, ast.Import):
          modules = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
          modules = [node.module]
        elif isinstance(node, ast.Call) and _is_require(node):
          args = [a.value for a in node.args
                  if isinstance(a, ast.Constant) and isinstance(a.value, str)]
          assert len(args) == 2, f"{rel}:{node.lineno}: require(module, extra)"
          out.append((rel, node.lineno, args[0], "require", args[1]))
          continue
        else:
          continue
        for module in modules:
          top = module.split(".")[0]
          if top in stdlib or top == "jaxlab" or top == "__future__":
            continue
          out.append((rel, node.lineno, module, kind_of(node), None))
  return out


class PackagingTest(absltest.TestCase):

  def test_the_walk_sees_every_kind_of_import(self):
    found = {(f, m, k) for f, _, m, k, _ in third_party_imports()}
    self.assertIn(("jaxlab/io/hf/files.py", "safetensors.numpy", "top"), found)
    self.assertIn(("jaxlab/data/audio.py", "soundfile", "require"), found)
    self.assertIn(("jaxlab/train/metrics.py", "tensorboardX", "lazy"), found)

  def test_imports_of_shared_code_are_core_dependencies(self):
    core, _ = declared()
    bad = [f"{f}:{line}: {m} ({', '.join(dists_of(m.split('.')[0]))}, {k})"
           for f, line, m, k, _ in third_party_imports()
           if k in ("top", "lazy") and not f.startswith(TEST_ONLY)
           and not core & set(dists_of(m.split(".")[0]))]
    self.assertEmpty(bad, "not core dependencies (declare them in "
                     "pyproject.toml, or import them through "
                     "_optional.require(module, extra)):\n" + "\n".join(bad))

  def test_require_names_an_extra_that_declares_the_module(self):
    core, extras = declared()
    bad = []
    for f, line, m, _, extra in third_party_imports():
      if extra is None:
        continue
      dists = set(dists_of(m.split(".")[0]))
      if extra not in extras:
        bad.append(f"{f}:{line}: no extra {extra!r} (extras: "
                   f"{', '.join(sorted(extras))})")
      elif not dists & extras[extra]:
        bad.append(f"{f}:{line}: [{extra}] does not declare "
                   f"{', '.join(sorted(dists))} (for {m})")
      elif dists & core:
        bad.append(f"{f}:{line}: {m} is a core dependency: import it")
    self.assertEmpty(bad, "\n".join(bad))

  def test_probed_and_test_only_imports_are_declared(self):
    core, extras = declared()
    anywhere = core.union(*extras.values())
    bad = []
    for f, line, m, k, _ in third_party_imports():
      dists = set(dists_of(m.split(".")[0]))
      if f.startswith(TEST_ONLY) and k != "probe":
        if not dists & (core | extras["test"]):
          bad.append(f"{f}:{line}: {m}: not in core or [test]")
      elif k == "probe" and not dists & anywhere:
        bad.append(f"{f}:{line}: {m}: declared nowhere")
    self.assertEmpty(bad, "\n".join(bad))

  def test_every_declared_dependency_is_imported(self):
    core, extras = declared()
    imported, shared = set(), set()
    for f, _, m, _, _ in third_party_imports():
      imported.update(dists_of(m.split(".")[0]))
      if not f.startswith(TEST_ONLY):
        shared.update(dists_of(m.split(".")[0]))
    unused = sorted(core - shared - set(CORE_NOT_IMPORTED))
    self.assertEmpty(unused, f"core dependencies nothing imports: {unused}")
    capability = set().union(*(extras[e] for e in
                               ("video", "audio", "tfds", "vision")))
    unused = sorted(capability - imported - set(EXTRA_NOT_IMPORTED))
    self.assertEmpty(unused, f"extra dependencies nothing imports: {unused}")

  def test_extras(self):
    _, extras = declared()
    for extra in ("video", "audio", "tfds", "vision", "cuda", "tpu", "test"):
      self.assertIn(extra, extras)
    # [test] includes every capability extra (the tests exercise them all).
    for extra in ("video", "audio", "tfds", "vision"):
      self.assertLessEqual(extras[extra], extras["test"], extra)
    self.assertNotIn("torch", declared()[0])
    self.assertIn("jax[cuda12]", "".join(
        pyproject()["project"]["optional-dependencies"]["cuda"]))
    self.assertIn("jax[tpu]", "".join(
        pyproject()["project"]["optional-dependencies"]["tpu"]))

  def test_console_script_and_no_unreal_urls(self):
    project = pyproject()["project"]
    self.assertEqual(project["scripts"]["jaxlab"], "jaxlab.main:entry")
    from jaxlab import main  # pylint: disable=g-import-not-at-top
    self.assertTrue(callable(main.entry))
    # No public URL exists yet: none is declared.
    self.assertNotIn("urls", project)
    self.assertEqual(pyproject()["tool"]["setuptools"]["packages"]["find"][
        "include"], ["jaxlab*"])

  def test_missing_extra_is_one_message_naming_it(self):
    from jaxlab import _optional  # pylint: disable=g-import-not-at-top
    with self.assertRaises(ImportError) as cm:
      _optional.require("jaxlab_no_such_module.sub", "video")
    self.assertEqual(
        str(cm.exception),
        f"{__name__} needs jaxlab_no_such_module: pip install 'jaxlab[video]'")
    self.assertIsInstance(cm.exception, _optional.MissingExtraError)
    self.assertIs(_optional.require("json", "video"), sys.modules["json"])


if __name__ == "__main__":
  absltest.main()
