#!/bin/sh
# export_map.sh CC HEADER [NODE] — a linker version script exporting exactly the functions HEADER
# declares (tern_* names followed by "(" in the preprocessed header, comments stripped by the
# preprocessor); everything else in libtern.so stays local. NODE (e.g. TERN_1, the SONAME's
# major version) names the symbol version the functions get, so that a later release can change
# one function's ABI under a new version node and keep the old one for programs linked before
# (include/tern.h, "ABI"); without NODE the script is anonymous (no symbol versions).
set -e
cc=$1
header=$2
node=${3:-}
names=$($cc -E -P "$header" | grep -oE '\btern_[a-z0-9_]+ *\(' | tr -d ' (' | sort -u)
[ -n "$names" ] || { echo "export_map.sh: no tern_ function found in $header" >&2; exit 1; }
echo "${node:+$node }{"
echo "  global:"
for n in $names; do echo "    $n;"; done
echo "  local: *;"
echo "};"
