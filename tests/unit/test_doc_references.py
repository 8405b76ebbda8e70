"""Every pointer into the documentation resolves: code and docs cite docs/<file>.md and
its sections (``docs/semantics.md#tf_config``), and Markdown links between the docs name
files and headings that exist. Nothing cites a document outside the repository."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: docs/<file>.md, with an optional #section, as code and prose cite them
CITED = re.compile(r"(?<![\w/.])docs/([\w-]+\.md)(?:#([\w-]+))?")
#: [text](target) in Markdown, target relative to the file
LINK = re.compile(r"\]\(([^)\s]+)\)")
TEXT = (".py", ".md", ".sh", ".yaml", ".toml")


def tracked() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True)
    if out.returncode != 0:  # not a checkout (an unpacked source tree): walk it
        return [p for p in REPO.rglob("*") if p.suffix in TEXT and ".venv" not in p.parts]
    return [REPO / f for f in out.stdout.split() if f.endswith(TEXT) or f == "Makefile"]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    found: set[str] = set()
    fenced = False
    for line in doc.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#+ (.*)", line)):
            found.add(slug(m.group(1)))
    return found


def test_slugs_are_githubs() -> None:
    assert slug("Upstream's defects we fix") == "upstreams-defects-we-fix"
    assert slug("TF_CONFIG") == "tf_config"
    assert slug("kind (for those with Docker)") == "kind-for-those-with-docker"


def test_every_citation_of_the_docs_resolves() -> None:
    broken: list[str] = []
    cited = 0
    for path in tracked():
        if not path.is_file():
            continue
        text = path.read_text(errors="replace")
        for m in CITED.finditer(text):
            cited += 1
            doc, section = REPO / "docs" / m.group(1), m.group(2)
            if not doc.is_file():
                broken.append(f"{path.relative_to(REPO)}: {m.group(0)}: no such file")
            elif section and section not in anchors(doc):
                broken.append(f"{path.relative_to(REPO)}: {m.group(0)}: no such section")
    assert cited >= 10  # the code's pointers into semantics.md at least
    assert broken == []


def test_every_markdown_link_between_files_resolves() -> None:
    broken: list[str] = []
    for path in tracked():
        if path.suffix != ".md":
            continue
        for m in LINK.finditer(path.read_text()):
            target = m.group(1)
            if re.match(r"[a-z]+:", target):
                continue  # http:, https:, mailto:
            file, _, section = target.partition("#")
            doc = (path.parent / file).resolve() if file else path
            if not doc.exists():
                broken.append(f"{path.relative_to(REPO)}: {target}: no such file")
            elif section and doc.suffix == ".md" and section not in anchors(doc):
                broken.append(f"{path.relative_to(REPO)}: {target}: no such section")
    assert broken == []


def test_nothing_cites_a_document_outside_the_repository() -> None:
    outside = re.compile(r"§|\bnotes §|shared/notes|semantics §")
    hits = [
        f"{p.relative_to(REPO)}:{i}"
        for p in tracked()
        if p.is_file() and p.name != Path(__file__).name
        for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
        if outside.search(line)
    ]
    assert hits == []
