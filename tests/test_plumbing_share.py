"""Every lesson stays a lesson: at most 25% of its code is plumbing, counted on the lesson as
ruff formats it (tools/dev/plumbing_share.py says what counts; docs/plumbing.md, which the tool
writes, has each lesson's share)."""

from __future__ import annotations

import re
import textwrap

from tools.dev import plumbing_share as tool

# A flag squeezed onto one line of 133 characters that ruff would split, kept so by the marker.
PLANTED = (
    "\n\ndef planted(parser):\n"
    '    parser.add_argument("--planted", type=int, default=0, '
    'help="a flag the test plants, too long for one line of ruff\'s")  # fmt: skip\n'
)


def test_every_lesson_is_at_or_under_the_plumbing_limit(capsys):
    assert tool.LIMIT == 0.25
    shares = {path.name: tool.measure(path) for path in tool.lessons()}
    assert {"01_matmul_add.py", "03_fused_mlp.py", "08_generate.py"} <= set(shares)
    over = {name: f"{s.share:.1%}" for name, s in shares.items() if s.share > tool.LIMIT}
    assert not over, f"plumbing over {tool.LIMIT:.0%}: {over} (tools/dev/plumbing_share.py --lines)"
    assert tool.main([]) == 0 and "04_d_kernels_attention.py" in capsys.readouterr().out


def test_docs_plumbing_md_is_the_tools_page_of_today_s_lessons():
    """docs/plumbing.md is written by the tool: regenerate it (its command is on the page)
    when a lesson's share changes."""
    page = (tool.ROOT / "docs" / "plumbing.md").read_text()
    date = re.search(r"on (\d{4}-\d{2}-\d{2})", page)
    assert date, "docs/plumbing.md names no date: write it with the tool"
    shares = [tool.measure(path) for path in tool.lessons()]
    assert page == tool.page(shares, date[1]), (
        "docs/plumbing.md is stale: uv run python -m tools.dev.plumbing_share --write "
        "docs/plumbing.md"
    )


def test_a_planted_plumbing_line_counts_as_ruff_formats_it(tmp_path):
    """A flag squeezed onto one line under `# fmt: skip` counts the lines ruff gives it, all
    plumbing: the marker hides nothing."""
    lesson = tool.ROOT / "02_linear.py"
    before = tool.measure(lesson)
    source = lesson.read_text()
    guard = source.rindex('\nif __name__ == "__main__":')
    planted = tmp_path / "02_linear.py"
    planted.write_text(source[:guard] + PLANTED + source[guard:])
    after = tool.measure(planted)
    added = after.counted - before.counted
    assert added > 2  # def + the call: 2 lines as written, more as ruff formats them
    assert len(after.plumbing) - len(before.plumbing) == added
    found = [n for n, kind in after.plumbing.items() if "--planted" in after.lines[n - 1]]
    assert found and after.plumbing[found[0]] == "parsing"
    # as written (unformatted), the same flag would have counted 2 lines
    raw = tool.measure_source(planted.read_text(), planted.name)
    assert raw.counted - tool.measure_source(source, lesson.name).counted == 2
    # fmt: off / on markers are removed too: what they fence is formatted
    fenced = planted.read_text().replace("\ndef planted", "\n# fmt: off\ndef planted")
    planted.write_text(fenced)
    assert tool.measure(planted).counted == after.counted


def test_a_lesson_pushed_over_the_limit_fails_the_gate(tmp_path, capsys):
    lesson = tool.ROOT / "08_generate.py"
    source = lesson.read_text()
    guard = source.rindex('\nif __name__ == "__main__":')
    plumbing = "".join(PLANTED.replace("planted", f"planted{i}") for i in range(40))
    heavy = tmp_path / lesson.name
    heavy.write_text(source[:guard] + plumbing + source[guard:])
    assert tool.measure(heavy).share > tool.LIMIT
    assert tool.main([str(heavy)]) == 1
    assert f"over {tool.LIMIT:.0%}" in capsys.readouterr().out


def test_parsing_refusals_helpers_and_knobs_count_as_plumbing_the_lesson_does_not(tmp_path):
    lesson = tmp_path / "09_example.py"
    lesson.write_text(
        textwrap.dedent(
            '''\
            """Docstring: not counted."""
            import sys

            import torch

            warnings_off = 1
            print("a knob")


            def parse(argv):
                parser = make_parser()
                parser.add_argument("--n")
                return parser.parse_args(argv)


            def tag(args):
                return f"n{args.n}"


            def forward(x):
                return torch.relu(x)


            def main(argv=None):
                args = parse(argv)
                if args.n == "0":
                    raise ValueError("no")
                return forward(torch.ones(int(args.n)))


            if __name__ == "__main__":
                sys.exit(main())
            '''
        )
    )
    share = tool.measure(lesson)
    source = share.lines  # as measured: formatted
    kinds = {source[n - 1].strip(): kind for n, kind in share.plumbing.items()}
    assert kinds == {
        'print("a knob")': "knobs",
        "def parse(argv):": "parsing",
        "parser = make_parser()": "parsing",
        'parser.add_argument("--n")': "parsing",
        "return parser.parse_args(argv)": "parsing",
        "args = parse(argv)": "set-up",
        "def tag(args):": "helpers",
        'return f"n{args.n}"': "helpers",
        'if args.n == "0":': "refusals",
        'raise ValueError("no")': "refusals",
    }
    # counted: everything after the docstring but the imports and the __main__ guard
    assert share.counted == 15


def test_setting_the_run_up_and_winding_it_down_is_plumbing_the_loop_is_not(tmp_path):
    """The calls every lesson makes alike around its module (the device, the files, the table,
    the exit code) count as plumbing; the profiler loop inside `with publishing(...)` and the
    reading of the trace stay the lesson's."""
    lesson = tmp_path / "09_example.py"
    lesson.write_text(
        textwrap.dedent(
            '''\
            """Docstring."""
            import torch


            def main(args):
                run = cli.resolve(args)
                out = outputs.prepare(args.traces_dir, "09_example", "tag")
                y = torch.ones(3, device=run.device)
                with outputs.publishing(out.trace, out.table) as (trace_tmp, table_tmp):
                    export(y, trace_tmp)
                seen = profiling.look(out, EXPECT)
                return profiling.finish(args, out, seen.as_expected)
            '''
        )
    )
    share = tool.measure(lesson)
    source = share.lines  # as measured: formatted
    kinds = {source[n - 1].strip(): kind for n, kind in share.plumbing.items()}
    assert kinds == {
        "run = cli.resolve(args)": "set-up",
        'out = outputs.prepare(args.traces_dir, "09_example", "tag")': "set-up",
        "with outputs.publishing(out.trace, out.table) as (trace_tmp, table_tmp):": "set-up",
        "return profiling.finish(args, out, seen.as_expected)": "set-up",
    }
    assert share.counted == 8


def test_a_guarded_import_is_an_import_and_what_uses_it_stays_the_lesson(tmp_path):
    """`try: from kernels import get_kernel / except ImportError:` (an optional library): the
    import is not counted, its except clause is a refusal, and a function calling get_kernel
    is still the lesson's, as with a plain import."""
    lesson = tmp_path / "09_example.py"
    lesson.write_text(
        textwrap.dedent(
            '''\
            """Docstring."""
            try:
                from kernels import get_kernel
            except ImportError:
                get_kernel = None


            def fetch():
                return get_kernel("org/repo", version=1)
            '''
        )
    )
    share = tool.measure(lesson)
    source = share.lines  # as measured: formatted
    kinds = {source[n - 1].strip(): kind for n, kind in share.plumbing.items()}
    assert kinds == {"except ImportError:": "refusals", "get_kernel = None": "refusals"}
    assert share.counted == 4  # the handler's two lines and fetch's two


def test_a_missing_lesson_is_one_line_and_exit_2(capsys):
    assert tool.main(["no_such_lesson.py"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no_such_lesson.py" in err
