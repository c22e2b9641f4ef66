"""README's examples as a reader runs them: the Python example against a real collector
loaded with the reference runs (docs/results/runs/), and `gpubench` written bare only
where README has said how it gets on PATH after `make demo`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from factories import import_reference_runs

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def _python_example() -> str:
    """The code block after README's "From Python"."""
    after = README[README.index("From Python"):]
    found = re.search(r"```python\n(.*?)```", after, re.DOTALL)
    assert found, "README has no Python example after 'From Python'"
    return found.group(1)


def test_the_python_example_answers_on_the_reference_runs(collector_factory: Any,
                                                         tmp_path: Path) -> None:
    db = tmp_path / "references.duckdb"
    import_reference_runs(db)
    running = collector_factory(db_path=db)
    code = _python_example()
    assert '"collector.example.org:50051"' in code and '"gpb_..."' in code
    code = code.replace('"collector.example.org:50051"', repr(running.address))
    code = code.replace('"gpb_..."', repr(running.make_token("reader")))
    names: dict[str, Any] = {}
    exec(compile(code, "README.md", "exec"), names)  # noqa: S102 - README's own example
    frame = names["df"]
    assert not frame.empty and "1x NVIDIA H200" in set(frame["gpu_config"])
    assert "1x Tesla T4" in {entry["gpu_config"] for entry in names["published"]}


def test_gpubench_is_written_bare_only_after_saying_how_it_gets_on_path() -> None:
    """`make demo` installs the commands into .venv/bin/, not on PATH: README says so
    where it first names them, and the demo's section activates the venv before its
    first bare `gpubench`."""
    two_commands = README[README.index("## Two commands"):README.index("## Benchmark")]
    assert "source .venv/bin/activate" in two_commands and ".venv/bin/gpubench" in two_commands
    demo = README[README.index("### On the demo's collector"):]
    assert demo.index("source .venv/bin/activate") < demo.index("$ gpubench ")
