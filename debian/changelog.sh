#!/bin/sh
# changelog.sh VERSION [CHANGELOG.md] — debian/changelog on stdout, generated from CHANGELOG.md:
# one entry per release section ("## [X.Y.Z] — YYYY-MM-DD"), newest first, with the section's
# first paragraph and the date. VERSION is TERN_VERSION of include/tern.h (the Makefile reads it);
# it must be CHANGELOG.md's newest release, so the packages' version has one source.
# The maintainer is debian/control's Maintainer field. `make deb` runs it.
set -eu
version=$1
changelog=${2:-CHANGELOG.md}
dir=$(dirname "$0")
maint=$(sed -n 's/^Maintainer: *//p' "$dir/control")
newest=$(sed -n 's/^## \[\([0-9.]*\)\].*/\1/p' "$changelog" | head -n 1)
if [ "$newest" != "$version" ]; then
    echo "debian/changelog.sh: include/tern.h says $version but the newest release of $changelog is '$newest'" >&2
    echo "  (add the section '## [$version] — YYYY-MM-DD' to $changelog)" >&2
    exit 1
fi
releases=$(sed -n 's/^## \[\([0-9.]*\)\] — \([0-9-]*\)$/\1 \2/p' "$changelog")
echo "$releases" | while read -r v d; do
    # releases of the same day (1.0.0 and 0.3.0) at 12:00, 12:01, ... from the oldest on, so that
    # each entry is later than the one before it (Debian's changelog, and lintian, want that)
    older=$(echo "$releases" | awk -v v="$v" -v d="$d" 'seen && $2 == d { n++ } $1 == v { seen = 1 } END { print n + 0 }')
    date=$(LC_ALL=C date -u -R -d "$d $(printf '12:%02d:00' "$older")")
    echo "tern ($v) unstable; urgency=medium"
    echo
    # the section's first paragraph, wrapped as a changelog item
    awk -v v="$v" '
        $0 ~ "^## \\[" v "\\]" { on = 1; next }
        on && /^$/ && text != "" { exit }
        on && /^#/ { exit }
        on && !/^$/ { text = text (text == "" ? "" : " ") $0 }
        END { if (text == "") text = "Release " v "."; print "Tern " v ": " text }' "$changelog" |
        fold -s -w 72 | sed -e 's/ *$//' -e '1s/^/  * /' -e '2,$s/^/    /'
    echo "  * The release notes: /usr/share/doc/tern/CHANGELOG.md.gz."
    echo
    echo " -- $maint  $date"
    echo
done
