"""The house guards itself: the layers (lessons -> common -> modules -> tracereader), no import
circle, no file over 600 lines, no long function without its reason (tests/house.py), over the
whole checkout; and the checker sees each fault when one is planted in a tree of its own."""

from __future__ import annotations

from pathlib import Path

from tests import house
from tests.helpers import ROOT


def test_the_checkout_keeps_the_house_rules():
    assert house.faults(ROOT) == []


def plant(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def function(lines: int, reason: str = "") -> str:
    body = "".join(f"    x{i} = {i}\n" for i in range(lines - 2))
    return f"{reason}def f():\n{body}    return 0\n"


SOUND = {
    "01_lesson.py": "from common import cli\nimport tracereader\n",
    "common/__init__.py": "",
    "common/cli.py": "from modules import models\nfrom tracereader import Parser\n",
    "modules/__init__.py": "",
    "modules/models.py": "import torch\nfrom tracereader.names import proton\n",
    "tracereader/__init__.py": "",
    "tracereader/names/__init__.py": "",
    "tracereader/names/proton.py": "SLOT = 'slot'\n",
    "tools/__init__.py": "",
    "tools/sweep.py": "from common import cli\nfrom modules.models import GeGLU\n",
}


def test_a_sound_tree_has_no_fault(tmp_path):
    assert house.faults(plant(tmp_path, SOUND)) == []


def test_a_circle_hidden_in_a_function_is_found(tmp_path):
    tree = dict(SOUND)
    tree["common/link.py"] = "def measure():\n    from common import bench\n"
    tree["common/bench.py"] = "from common import link\n"
    (fault,) = house.faults(plant(tmp_path, tree))
    assert fault == "import circle: common.bench -> common.link -> common.bench"


def test_an_upward_import_is_found_where_it_is(tmp_path):
    tree = dict(SOUND)
    tree["modules/models.py"] = "import torch\n\n\ndef refuse():\n    from common import cli\n"
    assert house.faults(plant(tmp_path, tree)) == [
        "modules/models.py:5: modules imports common.cli (common)",
        "import circle: common.cli -> modules.models -> common.cli",
    ]


def test_the_reader_imports_nothing_of_the_project(tmp_path):
    tree = dict(SOUND)
    tree["tracereader/names/proton.py"] = "from modules import models\n"
    assert house.faults(plant(tmp_path, tree)) == [
        "tracereader/names/proton.py:1: tracereader imports modules.models (modules)",
        "import circle: modules.models -> tracereader.names.proton -> modules.models",
    ]


def test_common_and_tools_reach_the_reader_through_its_door(tmp_path):
    tree = dict(SOUND)
    tree["tools/sweep.py"] = "from tracereader.names import proton\n"
    assert house.faults(plant(tmp_path, tree)) == [
        "tools/sweep.py:1: tracereader.names.proton: tools reaches the reader through `tracereader`"
    ]


def test_a_file_over_600_lines_is_found_and_600_pass(tmp_path):
    tree = dict(SOUND)
    tree["common/long.py"] = "x = 1\n" * 601
    tree["common/full.py"] = "x = 1\n" * 600
    assert house.faults(plant(tmp_path, tree)) == ["common/long.py: 601 lines (> 600)"]


def test_a_long_function_needs_its_reason(tmp_path):
    tree = dict(SOUND)
    tree["common/a.py"] = function(81)
    tree["common/b.py"] = function(80)
    tree["common/c.py"] = function(81, "# long: a table of flags, one per line\n# (argparse)\n")
    tree["common/d.py"] = function(81, "# a comment that gives no reason\n")
    faults = house.faults(plant(tmp_path, tree))
    assert [f.split(":")[0] for f in faults] == ["common/a.py", "common/d.py"]
    assert "f is 81 lines (> 80)" in faults[0]


def test_every_name_the_door_hands_out_resolves():
    """common/ and the tools import the reader's names from `tracereader` alone: each must load."""
    import tracereader

    for name in tracereader._DOOR:
        assert getattr(tracereader, name) is not None, name
