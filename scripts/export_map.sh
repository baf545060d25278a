#!/bin/sh
# export_map.sh CC HEADER — a linker version script exporting exactly the functions HEADER declares
# (tern_* names followed by "(" in the preprocessed header, comments stripped by the preprocessor);
# everything else in libtern.so stays local.
set -e
cc=$1
header=$2
names=$($cc -E -P "$header" | grep -oE '\btern_[a-z0-9_]+ *\(' | tr -d ' (' | sort -u)
[ -n "$names" ] || { echo "export_map.sh: no tern_ function found in $header" >&2; exit 1; }
echo "{"
echo "  global:"
for n in $names; do echo "    $n;"; done
echo "  local: *;"
echo "};"
