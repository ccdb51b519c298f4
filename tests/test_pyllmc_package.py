"""pyllmc as a package: its pure Python modules import without the compiled extension (and without torch), the old
module names at the root are the package's modules themselves, and the bindings' names say `make pyllmc` when the
extension is missing."""

from __future__ import annotations

from pathlib import Path

from conftest import PYTHON, run

# old name -> the package's module it stands for
OLD_NAMES = {
    "family": "pyllmc.family",
    "gpt2_family": "pyllmc.families.gpt2",
    "llama3_family": "pyllmc.families.llama3",
    "nanochat_family": "pyllmc.families.nanochat",
    "model_file": "pyllmc.model_file",
    "token_shards": "pyllmc.token_shards",
    "llama3_tokenizer": "pyllmc.llama3_tokenizer",
}

# a Python where the extension cannot be imported (None in sys.modules makes its import fail, as a missing file does)
WITHOUT_EXTENSION = "import sys; sys.modules['pyllmc._llmc'] = None\n"


def test_the_old_module_names_are_the_packages_modules(tmp_path: Path):
    imports = "".join(f"import {old}, {new}\nassert {old} is sys.modules[{new!r}], {old!r}\n"
                      for old, new in OLD_NAMES.items())
    # run outside the repository: the names come from the installed project, as the dev/ scripts get them
    proc = run([PYTHON, "-c", "import sys\n" + imports + "print('ok')"], cwd=tmp_path)
    assert proc.stdout.strip() == "ok", proc.stdout


def test_import_pyllmc_needs_neither_the_extension_nor_torch(tmp_path: Path):
    code = (WITHOUT_EXTENSION + "import pyllmc, pyllmc.model_file, pyllmc.token_shards, pyllmc.families.nanochat\n"
            "print(sorted(m for m in ('torch', 'pyllmc._core', 'pyllmc.model') if m in sys.modules))")
    proc = run([PYTHON, "-c", code], cwd=tmp_path)
    assert proc.stdout.strip() == "[]", proc.stdout


def test_a_binding_without_the_extension_is_one_import_error_naming_make_pyllmc(tmp_path: Path):
    for name in ("GPT2", "layers", "LlmcError"):
        code = WITHOUT_EXTENSION + f"import pyllmc\ntry:\n    pyllmc.{name}\nexcept ImportError as e:\n    print(e)\n"
        proc = run([PYTHON, "-c", code], cwd=tmp_path)
        lines = proc.stdout.splitlines()
        expected = "pyllmc: the C extension pyllmc/_llmc is not built: run `make pyllmc`"
        assert len(lines) == 1 and lines[0].startswith(expected), (name, proc.stdout)


def test_an_unknown_name_of_pyllmc_is_an_attribute_error(tmp_path: Path):
    code = "import pyllmc\ntry:\n    pyllmc.no_such_name\nexcept AttributeError as e:\n    print(e)\n"
    assert run([PYTHON, "-c", code], cwd=tmp_path).stdout.strip() == "module 'pyllmc' has no attribute 'no_such_name'"
