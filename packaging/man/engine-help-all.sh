#!/bin/sh
# SPDX-License-Identifier: GPL-3.0-or-later
# Usage: engine-help-all.sh ENGINE --help|--version
# help2man reads one --help; this one is the engine's followed by a COMMANDS
# section with every subcommand's usage, description, arguments and options, so
# that trainbench-engine(1) documents each subcommand. The subcommands are those
# the engine's help lists. Layout for help2man: "*Commands*" starts a section, a
# line ending in ":" followed by an indented line starts a subsection.
set -eu
engine=$1
case "${2:-}" in
  --version) exec "$engine" --version ;;
  --help) ;;
  *) echo "usage: $0 ENGINE --help|--version" >&2; exit 2 ;;
esac
help=$("$engine" --help)
printf '%s\n\n*Commands*\n' "$help"
for sub in $(printf '%s\n' "$help" | awk '
    /^[A-Za-z]+:$/ { in_subs = (tolower($0) == "subcommands:"); next }
    in_subs && /^  [a-z]/ { print $1 }'); do
  printf '\n'
  "$engine" "$sub" --help | awk '
    !usage && !/^Usage: / { desc = desc (desc == "" ? "" : " ") $0; next }
    /^Usage: / { usage = 1; sub(/^Usage: /, ""); print $0 ":"; print "  " desc; next }
    /^[A-Za-z]+:$/ { next }          # group headings: help2man would take them as sections
    /^  -h,--help / { next }          # documented once, under OPTIONS
    { print }'
done
