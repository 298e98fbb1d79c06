#!/usr/bin/env python3
"""Link check for README.md and the documentation site (docs/src/**/*.md).

Checked, without fetching anything from the network:

- every relative markdown link (`[text](path)`, `[text](path#anchor)`, `[text](#anchor)`)
  reaches an existing file, relative to the page that holds it;
- an `#anchor` names a heading of the target page, slugged as GitHub and mdBook slug
  headings (lowercase, punctuation other than `-` and `_` dropped, spaces as `-`, a
  repeated heading numbered `-1`, `-2`, ...); mdBook's `{{#include FILE}}` is followed, so
  a page that includes BENCHMARKS.md has BENCHMARKS.md's headings;
- every repository path in backticks that starts with scripts/, crates/, tests/,
  examples/, deploy/ or docs/ exists (its first word, so `scripts/soak.sh 120` checks
  scripts/soak.sh), and so does such a path at the start of a line of a fenced code block
  (after an optional `$ ` prompt); a path holding `<`, `*`, `{`, `...` or `…` is a pattern
  or a placeholder and is skipped.

External http(s) and mailto links are not fetched. Exits 1 listing every broken link.

Usage: scripts/check_links.py [FILE.md ...]   (default: README.md and docs/src/**/*.md)
"""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATH_PREFIXES = ("scripts/", "crates/", "tests/", "examples/", "deploy/", "docs/")
PLACEHOLDER = re.compile(r"[<*{]|\.\.\.|…")

FENCE = re.compile(r"^\s*(```|~~~)")
INCLUDE = re.compile(r"\{\{#include\s+([^}\s:]+)[^}]*\}\}")
# [text](target) or [text](target "title"); images too. Nested brackets in the text are rare
# here and not needed.
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(\S+)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def split_fenced(text):
    """(line number, line, inside a fenced block) for each line."""
    inside = False
    fence = None
    for number, line in enumerate(text.split("\n"), 1):
        m = FENCE.match(line)
        if m:
            if not inside:
                inside, fence = True, m.group(1)
                yield number, line, True
                continue
            if line.strip().startswith(fence):
                inside = False
                yield number, line, True
                continue
        yield number, line, inside


def expand_includes(path, text, depth=0):
    """The page as mdBook renders it: `{{#include FILE}}` replaced by FILE's text."""
    if depth > 5:
        return text

    def sub(m):
        target = os.path.normpath(os.path.join(os.path.dirname(path), m.group(1)))
        if not os.path.isfile(target):
            return m.group(0)
        return expand_includes(target, read(target), depth + 1)

    return INCLUDE.sub(sub, text)


def slug(heading):
    """GitHub's and mdBook's id for a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links: their text
    text = text.replace("`", "").replace("*", "")
    text = text.strip().lower().replace(" ", "-")
    return "".join(ch for ch in text if ch.isalnum() or ch in "-_")


_anchors = {}


def anchors(path):
    """Every heading id of a markdown file (after includes), numbered as renderers do."""
    if path not in _anchors:
        ids = set()
        seen = {}
        text = expand_includes(path, read(path))
        for _, line, fenced in split_fenced(text):
            if fenced:
                continue
            m = HEADING.match(line)
            if not m:
                continue
            base = slug(m.group(2))
            count = seen.get(base, 0)
            ids.add(base if count == 0 else f"{base}-{count}")
            seen[base] = count + 1
        _anchors[path] = ids
    return _anchors[path]


def is_external(target):
    return re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) is not None


def check_link(page, number, target, problems):
    if not target or is_external(target):
        return
    path, _, anchor = target.partition("#")
    if path:
        resolved = os.path.normpath(os.path.join(os.path.dirname(page), path))
        if not os.path.exists(resolved):
            problems.append(f"{rel(page)}:{number}: link to a missing file: {target}")
            return
    else:
        resolved = page
    if anchor:
        if os.path.isdir(resolved) or not resolved.endswith(".md"):
            problems.append(f"{rel(page)}:{number}: anchor on a file that is not a page: {target}")
        elif anchor not in anchors(resolved):
            problems.append(
                f"{rel(page)}:{number}: no heading '#{anchor}' in {rel(resolved)}"
            )


def repository_path(word):
    """The repository path a word names, or None when it names none to check."""
    word = word.strip().rstrip(".,;:)")
    if not word.startswith(PATH_PREFIXES) or PLACEHOLDER.search(word):
        return None
    return word


def check_path(page, number, word, problems):
    path = repository_path(word)
    if path and not os.path.exists(os.path.join(ROOT, path)):
        problems.append(f"{rel(page)}:{number}: no such path in the repository: {path}")


def rel(path):
    return os.path.relpath(path, ROOT)


def check_page(page, problems):
    text = read(page)
    for number, line, fenced in split_fenced(text):
        if fenced:
            if FENCE.match(line):
                continue
            words = line.strip().split()
            if words and words[0] == "$":
                words = words[1:]
            if words:
                check_path(page, number, words[0], problems)
            continue
        for m in CODE_SPAN.finditer(line):
            words = m.group(2).strip().split()
            if words:
                check_path(page, number, words[0], problems)
        # Links inside code spans are not links.
        bare = CODE_SPAN.sub("", line)
        for m in LINK.finditer(bare):
            check_link(page, number, m.group(1), problems)
        m = REF_DEF.match(bare)
        if m:
            check_link(page, number, m.group(1), problems)


def default_pages():
    pages = [os.path.join(ROOT, "README.md")]
    for base, _, files in os.walk(os.path.join(ROOT, "docs", "src")):
        pages += [os.path.join(base, f) for f in sorted(files) if f.endswith(".md")]
    return pages


def main(argv):
    pages = [os.path.abspath(p) for p in argv[1:]] or default_pages()
    problems = []
    for page in pages:
        check_page(page, problems)
    for problem in problems:
        print(problem)
    if problems:
        print(f"check_links: {len(problems)} broken link(s) in {len(pages)} page(s)", file=sys.stderr)
        return 1
    print(f"check_links: {len(pages)} page(s), every link and path resolves", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
