"""Rewrite the README's ladder table from the registry: python3 tools/sync_readme.py"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from lab.ladder.registry import markdown_table  # noqa: E402

PATTERN = re.compile(r"(<!-- ladder:start[^\n]*-->\n).*?(<!-- ladder:end -->)", re.S)


def synced(text: str) -> str:
    return PATTERN.sub(lambda m: m.group(1) + markdown_table() + "\n" + m.group(2), text)


if __name__ == "__main__":
    readme = ROOT / "README.md"
    readme.write_text(synced(readme.read_text()))
