#!/usr/bin/env python3
"""Turn the JSON examples of the specification into fuzz seeds.

Usage: extract_spec_examples.py SPEC_DIR OUT_DIR

Reads every fenced ```json block of PROTOCOL.md and CONTROL.md in SPEC_DIR.
A block may hold several frames and a frame may span several lines; each
top-level JSON object becomes one seed file holding that object on one line.
The text is kept as written, `…` placeholders included (a few examples use a
bare `…` outside a string and are therefore not valid JSON; they are kept
anyway: rejected input is a useful seed too).

Seeds are named spec-<doc>-<line>-<type>.json, <line> being the line of the
spec where the frame starts. Earlier spec-* files in OUT_DIR are removed first,
so a rerun after a spec change leaves no stale seeds; other files (the
hand-made edge-* seeds) are left alone.
"""

import pathlib
import re
import sys

DOCS = ("PROTOCOL.md", "CONTROL.md")


def json_blocks(text):
    """Yield (first line number, lines) for each ```json fenced block."""
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        if lines[i].strip().startswith("```json"):
            start = i + 2  # 1-based number of the block's first content line
            body = []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith("```"):
                body.append(lines[i])
                i += 1
            yield start, body
        i += 1


def frames(start, body):
    """Split a block into top-level objects; yield (line number, one-line text)."""
    depth = 0
    in_string = False
    escaped = False
    current = []
    first_line = None
    for offset, line in enumerate(body):
        piece = []
        for ch in line:
            if depth == 0 and not in_string:
                if ch.isspace():
                    continue
                if ch != "{":
                    raise ValueError(f"line {start + offset}: text outside an object: {line!r}")
                first_line = start + offset
            piece.append(ch)
            if in_string:
                if escaped:
                    escaped = False
                elif ch == "\\":
                    escaped = True
                elif ch == '"':
                    in_string = False
            elif ch == '"':
                in_string = True
            elif ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    current.append("".join(piece).strip())
                    piece = []
                    yield first_line, "".join(current)
                    current = []
        if piece:
            # A frame continues on the next line: drop the indentation only.
            current.append("".join(piece).strip())
    if depth != 0 or in_string:
        raise ValueError(f"block at line {start}: unbalanced braces or quotes")


def frame_type(text):
    match = re.search(r'"type"\s*:\s*"([A-Z_]+)"', text)
    return match.group(1).lower() if match else "untyped"


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    spec, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("spec-*.json"):
        old.unlink()
    count = 0
    for doc in DOCS:
        stem = doc.removesuffix(".md").lower()
        for start, body in json_blocks((spec / doc).read_text(encoding="utf-8")):
            for line, text in frames(start, body):
                name = f"spec-{stem}-{line:04d}-{frame_type(text)}.json"
                (out / name).write_text(text, encoding="utf-8")
                count += 1
    print(f"wrote {count} seeds to {out}")


if __name__ == "__main__":
    main()
