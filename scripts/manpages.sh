#!/bin/sh
# manpages.sh TERN OUTDIR — man pages generated from the CLI's own help: OUTDIR/tern.1 from
# `TERN --help` and OUTDIR/tern-COMMAND.1 from `TERN COMMAND --help` for every command that
# `TERN --help` lists (so the pages say exactly what --help says, and cannot drift from it).
# The help text goes into the page as it is (preformatted), its "usage:" lines as the SYNOPSIS,
# its section lines ("model:", "search:", ...) in bold. Read one with `man -l OUTDIR/tern.1`.
set -eu
tern=$1
out=$2
mkdir -p "$out"
version=$("$tern" --version | sed -n 's/^tern //p')
[ -n "$version" ] || { echo "manpages.sh: '$tern --version' gave no version" >&2; exit 1; }

# page NAME SUMMARY SEE_ALSO < help text  > roff (strings through the environment: awk -v would
# read the backslashes of SEE_ALSO's font escapes)
page() {
    NAME=$1 SUMMARY=$2 SEE=$3 VERSION=$version awk '
    function esc(s) {                        # roff: backslashes, then a leading . or '"'"'
        gsub(/\\/, "\\e", s)
        if (s ~ /^[.'"'"']/) s = "\\&" s
        return s
    }
    BEGIN {
        name = ENVIRON["NAME"]; summary = ENVIRON["SUMMARY"]; see = ENVIRON["SEE"]; version = ENVIRON["VERSION"]
        up = toupper(name)
        printf ".TH \"%s\" 1 \"\" \"tern %s\" \"Tern manual\"\n", up, version
        printf ".SH NAME\n%s \\- %s\n", esc(name), esc(summary)
        state = "start"
    }
    state == "start" && /^usage: / { print ".SH SYNOPSIS\n.nf"; sub(/^usage: /, ""); print esc($0); state = "usage"; next }
    state == "start" && /^$/ { next }
    state == "start" { print ".SH DESCRIPTION\n.nf"; state = "body" }
    state == "usage" && /^ +[^ ]/ { sub(/^ +/, ""); print esc($0); next }
    state == "usage" { print ".fi\n.SH DESCRIPTION\n.nf"; state = "body"; if (/^$/) next }
    state == "body" && /^[A-Za-z][^:]*:$/ && length($0) < 60 { print "\\fB" esc($0) "\\fR"; next }
    state == "body" { print esc($0) }
    END {
        print ".fi"
        if (see != "") printf ".SH SEE ALSO\n%s\n", see
    }'
}

help=$("$tern" --help)
cmds=$(printf '%s\n' "$help" | awk '/^commands:/ { on = 1; next } on && /^$/ { exit } on && /^  [a-z]/ { print $1 }')
[ -n "$cmds" ] || { echo "manpages.sh: '$tern --help' lists no command" >&2; exit 1; }

see=""
for c in $cmds; do see="$see${see:+, }\\fBtern-$c\\fR(1)"; done
printf '%s\n' "$help" | sed 1d | page tern "neural machine translation (translate, score, train, serve)" "$see" > "$out/tern.1"

for c in $cmds; do
    summary=$(printf '%s\n' "$help" | awk -v c="$c" '/^commands:/ { on = 1; next } on && $1 == c { $1 = ""; sub(/^ +/, ""); print; exit }')
    "$tern" "$c" --help | page "tern-$c" "$summary" "\\fBtern\\fR(1)" > "$out/tern-$c.1"
done
