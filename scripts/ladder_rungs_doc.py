#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Writes docs/ladder.md's table of rungs from the engine's declaration
(engine/ladder/rungs.cpp, through `trainbench-engine ladder --list-rungs
--json -`), between the two marker lines below. With --check it writes
nothing and exits 1 when the doc differs from what the engine says (the
docs_ladder_rungs test), so the table cannot drift from the rungs.

    scripts/ladder_rungs_doc.py --engine build/bin/trainbench-engine docs/ladder.md
    scripts/ladder_rungs_doc.py --engine build/bin/trainbench-engine --check docs/ladder.md
"""
import argparse
import json
import subprocess
import sys

BEGIN = ("<!-- the rungs: written by scripts/ladder_rungs_doc.py from "
         "`trainbench-engine ladder --list-rungs --json -`; do not edit by hand -->")
END = "<!-- end of the rungs -->"


def cell(value):
    return json.dumps(value) if not isinstance(value, str) else value


def rung_table(listed):
    by_id = {r["id"]: r for r in listed["rungs"]}
    lines = ["| rung | title | sets (on the default configuration) | changes the numbers |",
             "|---|---|---|---|"]
    for rung_id in listed["order"]:
        r = by_id[rung_id]
        sets = ", ".join(f"`{k}={cell(v)}`" for k, v in r["sets"].items())
        lines.append(f"| `{r['id']}` | {r['title']} | {sets} | "
                     f"{'yes' if r['changes_results'] else 'no'} |")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--engine", required=True, help="the trainbench-engine binary")
    p.add_argument("--check", action="store_true", help="only compare; exit 1 when out of date")
    p.add_argument("doc", help="docs/ladder.md")
    a = p.parse_args()
    listed = json.loads(subprocess.run([a.engine, "ladder", "--list-rungs", "--json", "-"],
                                       check=True, capture_output=True, text=True).stdout)
    with open(a.doc, encoding="utf-8") as f:
        text = f.read()
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        sys.exit(f"{a.doc}: expected one '{BEGIN}' line followed by one '{END}' line")
    head, rest = text.split(BEGIN)
    _, tail = rest.split(END)
    updated = f"{head}{BEGIN}\n{rung_table(listed)}\n{END}{tail}"
    if updated == text:
        return 0
    if a.check:
        print(f"{a.doc}: the table of rungs differs from the engine's; run "
              f"scripts/ladder_rungs_doc.py --engine {a.engine} {a.doc}", file=sys.stderr)
        return 1
    with open(a.doc, "w", encoding="utf-8") as f:
        f.write(updated)
    print(f"wrote the table of rungs into {a.doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
