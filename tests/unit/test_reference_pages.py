"""docs/reference/ against the command line, and the README as a guide (issue 40 item 4).

The pages' `--help` part is written by scripts/gen_reference.py; a changed option, a changed help text
or a new command makes these fail until the script is run again. The README stays a guide (about 250
lines at most) whose links, and the reference's, lead somewhere. The quickstart's commands are run as
written by tests/engine/test_readme_quickstart_docker.py.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gen_reference.py"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs" / "reference").glob("*.md")),
         *sorted((ROOT / "docs" / "bench-runs").glob("*.md"))]


def gen_reference():
    spec = importlib.util.spec_from_file_location("gen_reference", SCRIPT)
    assert spec is not None and spec.loader is not None, SCRIPT
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_command_has_a_page_and_every_page_matches_help():
    gen = gen_reference()
    assert gen.unlisted(gen._main()) == [], "a command no page of docs/reference lists: add it to GROUPS"
    assert gen.stale_pages(write=False) == [], "docs/reference is out of date: run python3 scripts/gen_reference.py"


def test_a_page_holds_every_option_of_its_commands():
    """What the pages say, read back: each command's options appear on its group's page, so a page
    that lost its generated part (or never had one) fails here, not only a changed one."""
    gen = gen_reference()
    main = gen._main()
    for page, names in gen.GROUPS.items():
        text = (ROOT / "docs" / "reference" / f"{page}.md").read_text()
        generated = text.split(gen.BEGIN, 1)[1].split(gen.END, 1)[0]
        for name in names:
            for path, cmd in gen._walk(main.commands[name], [name]):
                assert f"### `buildkit {' '.join(path)}`" in generated, (page, path)
                for param in cmd.params:
                    if getattr(param, "hidden", False):  # kept for old scripts, not shown by --help
                        continue
                    for opt in getattr(param, "opts", []):
                        if opt.startswith("--"):
                            assert opt in generated, (page, path, opt)


def test_regenerating_replaces_only_the_generated_part():
    gen = gen_reference()
    page = (ROOT / "docs" / "reference" / "publish.md").read_text()
    prose, rest = page.split(gen.BEGIN, 1)
    block = gen.BEGIN + rest.split(gen.END, 1)[0] + gen.END + "\n"
    edited = prose + block.replace("--release", "--relaese")
    assert gen.page_text(edited, block) == page
    assert gen.page_text(prose.rstrip("\n") + "\n", block).endswith(block)


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_the_readme_is_a_guide_and_its_links_lead_somewhere():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 260, "README.md is the guide; reference goes to docs/reference/"
    for section in ("Install", "Quickstart", "The seed's own build", "Deploying the image", "A nightly on GitHub"):
        assert re.search(rf"^## {re.escape(section)}", readme, re.M), section
    broken = []
    for page in PAGES:
        text = page.read_text()
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"^[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            if dest.is_dir():
                dest = dest / "README.md"
            if not dest.is_file():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
            elif anchor and dest.suffix == ".md":
                anchors = {slug(h) for h in re.findall(r"^#+ (.+)$", dest.read_text(), re.M)}
                if anchor not in anchors:
                    broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == []
