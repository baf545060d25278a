#!/bin/sh
# export_map.sh CC HEADER [NODE] — a linker version script exporting exactly the functions HEADER
# declares (tern_* names followed by "(" in the preprocessed header, comments stripped by the
# preprocessor); everything else in libtern.so stays local.
#
# NODE (e.g. TERN_1, the SONAME's major version) is the symbol version of the functions of the
# major version's first release. HEADER marks the others (include/tern.h, "Version and ABI"),
# with an empty macro on the line that names the function:
#   TERN_SINCE_<MAJOR>_<MINOR>    added in that minor release: in node <NODE>.<MINOR> only;
#   TERN_CHANGED_<MAJOR>_<MINOR>  its ABI changed then: in <NODE>.<MINOR> (the default version,
#                                 defined with .symver name@@<NODE>.<MINOR>) and in <NODE> (the
#                                 old one, defined with .symver name@<NODE>).
# A function whose ABI changed twice carries both marks (TERN_CHANGED_1_1 TERN_CHANGED_1_3 ...): it
# is then in <NODE>, <NODE>.1 and <NODE>.3 (the source's .symver directives say which is default).
# Each <NODE>.<MINOR> inherits from the one before. Without NODE the script is anonymous (no
# symbol versions, no marks read).
set -e
cc=$1
header=$2
node=${3:-}
names=$($cc -E -P "$header" | grep -oE '\btern_[a-z0-9_]+ *\(' | tr -d ' (' | sort -u)
[ -n "$names" ] || { echo "export_map.sh: no tern_ function found in $header" >&2; exit 1; }
if [ -z "$node" ]; then
  echo "{"
  echo "  global:"
  for n in $names; do echo "    $n;"; done
  echo "  local: *;"
  echo "};"
  exit 0
fi
major=${node#TERN_}
# "KIND MAJOR MINOR name" for each marked declaration; a mark whose line names no function fails
marks=$(grep -E "^[[:space:]]*TERN_(SINCE|CHANGED)_[0-9]+_[0-9]+[[:space:]]" "$header" || true)
# each line's marks (one or more in a row at its start) and the function it declares ("BAD" when it
# declares none)
marked=$(printf '%s\n' "$marks" | while IFS= read -r line; do
  [ -n "$line" ] || continue
  n=$(printf '%s\n' "$line" | sed -nE \
    's/^[[:space:]]*(TERN_(SINCE|CHANGED)_[0-9]+_[0-9]+[[:space:]]+)+[^(]*[^a-z0-9_](tern_[a-z0-9_]+)[[:space:]]*\(.*/\3/p')
  if [ -z "$n" ]; then echo BAD; continue; fi
  printf '%s\n' "$line" | sed -nE 's/^[[:space:]]*((TERN_(SINCE|CHANGED)_[0-9]+_[0-9]+[[:space:]]+)+).*/\1/p' |
    grep -oE 'TERN_(SINCE|CHANGED)_[0-9]+_[0-9]+' | sed -E "s/^TERN_([A-Z]+)_([0-9]+)_([0-9]+)$/\1 \2 \3 $n/"
done)
if printf '%s\n' "$marked" | grep -qx BAD; then
  echo "export_map.sh: a TERN_SINCE_/TERN_CHANGED_ mark in $header is not on a line declaring a tern_ function:" >&2
  printf '%s\n' "$marks" >&2; exit 1
fi
printf '%s\n' "$marked" | while read -r kind ma mi n; do
  [ -z "$n" ] && continue
  [ "$ma" = "$major" ] || { echo "export_map.sh: $n is marked for MAJOR $ma in a MAJOR $major header" >&2; exit 1; }
  printf '%s\n' "$names" | grep -qx "$n" || { echo "export_map.sh: marked $n is not a declared function" >&2; exit 1; }
done
since=$(printf '%s\n' "$marked" | awk '$1 == "SINCE" {print $4}' | sort -u)
minors=$(printf '%s\n' "$marked" | awk 'NF == 4 {print $3}' | sort -n -u)
echo "$node {"
echo "  global:"
for n in $names; do printf '%s\n' "$since" | grep -qx "$n" || echo "    $n;"; done
echo "  local: *;"
echo "};"
prev=$node
for mi in $minors; do
  echo "$node.$mi {"
  echo "  global:"
  printf '%s\n' "$marked" | awk -v m="$mi" 'NF == 4 && $3 == m {print "    " $4 ";"}' | sort -u
  echo "} $prev;"
  prev=$node.$mi
done
