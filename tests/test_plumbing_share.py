"""Every lesson stays a lesson: under 30% of its code is plumbing (tools/dev/plumbing_share.py
says what counts; docs/plumbing.md has each lesson's share)."""

from __future__ import annotations

import textwrap

from tools.dev import plumbing_share as tool


def test_every_lesson_is_under_the_plumbing_limit(capsys):
    shares = {path.name: tool.measure(path) for path in tool.lessons()}
    assert {"01_matmul_add.py", "03_fused_mlp.py", "04_c_sdpa_attention.py"} <= set(shares)
    over = {name: f"{s.share:.0%}" for name, s in shares.items() if s.share > tool.LIMIT}
    assert not over, f"plumbing over {tool.LIMIT:.0%}: {over} (tools/dev/plumbing_share.py --lines)"
    assert tool.main([]) == 0 and "04_d_kernels_attention.py" in capsys.readouterr().out


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
    source = lesson.read_text().splitlines()
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
    source = lesson.read_text().splitlines()
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
    source = lesson.read_text().splitlines()
    kinds = {source[n - 1].strip(): kind for n, kind in share.plumbing.items()}
    assert kinds == {"except ImportError:": "refusals", "get_kernel = None": "refusals"}
    assert share.counted == 4  # the handler's two lines and fetch's two


def test_a_missing_lesson_is_one_line_and_exit_2(capsys):
    assert tool.main(["no_such_lesson.py"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no_such_lesson.py" in err
