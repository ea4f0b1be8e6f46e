#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Turns a .cu file into C++ for the CUDA emulator (emulator.h).

Each launch `kernel<targs><<<grid, block[, smem[, stream]]>>>(args)` becomes
`::tb_emu::launch(::tb_emu::Config(grid, block, ...), [=](auto&&... a) {
kernel<targs>(a...); }, args)`: the call in the lambda deduces a template
kernel's arguments and picks an overload from the launch's arguments, as nvcc
does,
and it captures by value (a kernel picked into a local variable), since a
launch recorded into a CUDA graph runs again later; nothing else changes, and line numbers are kept (a #line directive names the
.cu file), so compiler messages and the emulator's barrier sites point at the
original source.

usage: rewrite_launches.py IN.cu OUT.cpp
"""
import re
import sys

# A kernel name (optionally qualified), optional template arguments (one
# level of nested <...> allowed, e.g. `k<T, u()>`), then <<<config>>>(.
LAUNCH = re.compile(
    r"(?P<name>[A-Za-z_]\w*(?:::[A-Za-z_]\w*)*)\s*"
    r"(?P<targs><(?:[^<>;{}]|<[^<>;{}]*>)*>)?\s*"
    r"<<<(?P<config>.*?)>>>\s*\(",
    re.S,
)


def rewrite(text):
    out, pos, count = [], 0, 0
    for m in LAUNCH.finditer(text):
        out.append(text[pos:m.start()])
        kernel = m.group("name") + (m.group("targs") or "")
        rest = text[m.end():]
        empty_args = rest.lstrip().startswith(")")
        # One line, so the source keeps its line numbers.
        out.append("::tb_emu::launch(::tb_emu::Config(%s), [=](auto&&... tb_emu_a) "
                   "{ %s(tb_emu_a...); }%s"
                   % (m.group("config"), kernel, "" if empty_args else ", "))
        pos = m.end()
        count += 1
    out.append(text[pos:])
    return "".join(out), count


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__)
    src, dst = argv[1], argv[2]
    with open(src, encoding="utf-8") as f:
        text = f.read()
    body, count = rewrite(text)
    if "<<<" in body:
        line = body[:body.index("<<<")].count("\n") + 1
        sys.exit("%s:%d: a launch the emulator's rewrite does not understand" % (src, line))
    with open(dst, "w", encoding="utf-8") as f:
        f.write('#line 1 "%s"\n' % src)
        f.write(body)
    return count


if __name__ == "__main__":
    main(sys.argv)
