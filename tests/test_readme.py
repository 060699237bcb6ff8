"""The README's ladder table is generated from the registry and must not drift from it."""

import importlib.util
from conftest import REPO  # noqa: E402


def test_readme_ladder_matches_registry():
    spec = importlib.util.spec_from_file_location("sync_readme", REPO / "tools" / "sync_readme.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    text = (REPO / "README.md").read_text()
    assert mod.synced(text) == text, "README ladder table is stale: run python3 tools/sync_readme.py"


def test_readme_names_the_ci_test_command():
    ci = (REPO / ".ci" / "run").read_text()
    assert "python3 -m pytest -q" in (REPO / "README.md").read_text()
    assert "python3 -m pytest -q" in ci


# ------------------------------------------------------------------------------ the README's commands

def _readme_commands() -> list[tuple[str, list[str]]]:
    """Every `lab ...` line of the README's bash blocks, as (line, argv), the comment dropped."""
    import re
    import shlex

    text = (REPO / "README.md").read_text()
    found = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.splitlines():
            for part in line.split(" && "):   # `lab init my-attn && cd my-attn`: each command alone
                argv = shlex.split(part, comments=True)
                if argv[:1] == ["lab"]:
                    found.append((part.split("  #")[0].strip(), argv[1:]))
    return found


def _resolve(argv: list[str]):
    """Parse argv as the lab's CLI would, without running it: each (group or) command's context."""
    import warnings

    import click

    from lab.cli import main

    ctx = main.make_context("lab", list(argv), resilient_parsing=False)
    contexts = [ctx]
    while isinstance(ctx.command, click.Group):
        with warnings.catch_warnings():   # click 8.2 deprecates protected_args; 9.0 folds it into args
            warnings.simplefilter("ignore", DeprecationWarning)
            rest = [*getattr(ctx, "protected_args", []), *ctx.args]
        if not rest:
            break
        name, cmd, args = ctx.command.resolve_command(ctx, rest)
        ctx = cmd.make_context(name, args, parent=ctx)
        contexts.append(ctx)
    return contexts


def test_every_readme_command_parses_and_asks_what_its_rungs_can_do():
    """Each `lab` command the README shows parses as written (its options exist, its values have their
    types), names rungs the registry has, and asks a backward only of a rung that has one."""
    from lab.ladder import registry
    from lab.measure.call import require_mode

    commands = _readme_commands()
    assert len(commands) >= 20 and any("--mode bwd" in line for line, _ in commands)
    workspace_ids = set()
    for line, argv in commands:
        contexts = _resolve(argv)
        params = {k: v for c in contexts for k, v in c.params.items()}
        if contexts[-1].command.name == "new":          # a workspace rung the walk-through makes
            workspace_ids.add(params["new_id"])
            registry.get(params["from_id"])
            continue
        spec = params.get("variant_spec") or params.get("variant_id")
        if not spec or spec in ("all", "none"):
            continue
        ids = [i for i in spec.split(",") if i not in workspace_ids]
        rungs = [registry.get(i) for i in ids]
        for mode in str(params.get("mode") or params.get("mode_spec") or "fwd").split(","):
            for v in rungs:
                require_mode(v, mode)   # LabError (the test fails) where the rung has no backward


def test_the_readme_walks_through_the_backward():
    text = (REPO / "README.md").read_text()
    assert "forward and backward" in text.split("\n## ")[0]
    backward = next(v for v in __import__("lab.ladder.registry", fromlist=["x"]).builtin() if v.backward)
    walk = [line for line, argv in _readme_commands() if backward.id in argv and "--mode" in " ".join(argv)]
    for command in ("check", "bench", "sweep", "profile"):
        assert any(line.startswith(f"lab {command} ") for line in walk), (command, walk)
