#!/bin/sh
# SPDX-License-Identifier: GPL-3.0-or-later
# Usage: engine-help-all.sh ENGINE --help|--version
# help2man reads one --help; this one is the engine's followed by every
# subcommand's (their usage, arguments and options), so that trainbench-engine(1)
# documents each subcommand. The subcommands are those the engine's help lists.
set -eu
engine=$1
case "${2:-}" in
  --version) exec "$engine" --version ;;
  --help) ;;
  *) echo "usage: $0 ENGINE --help|--version" >&2; exit 2 ;;
esac
help=$("$engine" --help)
printf '%s\n' "$help"
for sub in $(printf '%s\n' "$help" | awk '
    /^[A-Za-z]+:$/ { in_subs = (tolower($0) == "subcommands:"); next }
    in_subs && /^  [a-z]/ { print $1 }'); do
  printf '\nCommand %s:\n' "$sub"
  # The subcommand's own description line is already in the list above; its
  # group headings become subsections of this command.
  "$engine" "$sub" --help | sed -e '1{/^Usage:/!d}' -e "s/^\([A-Z][a-z]*\):\$/  \1 of $sub:/"
done
