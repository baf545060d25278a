#!/bin/sh
# install.sh install|uninstall — what `make install` and `make uninstall` run (the Makefile passes
# the variables below). One list of files serves both, so uninstall removes exactly what install
# wrote (and the directories that are Tern's own: share/tern, share/doc/tern).
#
#   BUILD        the build folder (tern, libtern.so.X.Y.Z, libtern.a, man/)
#   DESTDIR      staging root prepended to every path written (packaging); empty by default
#   BINDIR LIBDIR INCLUDEDIR DATADIR MANDIR DOCDIR PKGCONFIGDIR PREFIX   where things go
#   VERSION SONAME SOFILE   from include/tern.h (Makefile)
#   RT_LIBS      the runtime's own libraries (tern.pc's Libs.private: static linking)
set -eu
action=$1
: "${BUILD:?}" "${PREFIX:?}" "${BINDIR:?}" "${LIBDIR:?}" "${INCLUDEDIR:?}" "${DATADIR:?}" "${MANDIR:?}"
: "${DOCDIR:?}" "${PKGCONFIGDIR:?}" "${VERSION:?}" "${SONAME:?}" "${SOFILE:?}" "${RT_LIBS:?}"
DESTDIR=${DESTDIR:-}
MODELDIR=$DATADIR/tern/models

# manifest: "MODE SOURCE DEST" lines (MODE: an octal mode, or "link" with SOURCE the link's text)
manifest() {
    echo "755 $BUILD/tern $BINDIR/tern"
    echo "755 $BUILD/$SOFILE $LIBDIR/$SOFILE"
    echo "link $SOFILE $LIBDIR/$SONAME"
    echo "link $SONAME $LIBDIR/libtern.so"
    echo "644 $BUILD/libtern.a $LIBDIR/libtern.a"
    echo "644 include/tern.h $INCLUDEDIR/tern.h"
    echo "644 $BUILD/tern.pc $PKGCONFIGDIR/tern.pc"
    for f in "$BUILD"/man/*.1; do echo "644 $f $MANDIR/man1/${f##*/}"; done
    for d in models/*/; do
        d=${d%/}
        for f in "$d"/*; do [ -f "$f" ] && echo "644 $f $MODELDIR/${d##*/}/${f##*/}"; done
    done
    for f in LICENSE CHANGELOG.md README.md; do echo "644 $f $DOCDIR/$f"; done
}

fail_dir() {
    echo "make install: cannot write to $1 (PREFIX=$PREFIX${DESTDIR:+, DESTDIR=$DESTDIR})." >&2
    echo "  Choose a prefix you may write to, e.g. 'make install PREFIX=\$HOME/.local', or run it as a user" >&2
    echo "  who may write there. Nothing was installed." >&2
    exit 1
}

case $action in
install)
    # tern.pc for this prefix (paths under the prefix written with ${prefix})
    rel() { case $1 in "$PREFIX"/*) echo "\${prefix}${1#"$PREFIX"}";; *) echo "$1";; esac; }
    sed -e "s|@PREFIX@|$PREFIX|" -e "s|@LIBDIR@|$(rel "$LIBDIR")|" -e "s|@INCLUDEDIR@|$(rel "$INCLUDEDIR")|" \
        -e "s|@VERSION@|$VERSION|" -e "s|@RT_LIBS@|$RT_LIBS|" scripts/tern.pc.in > "$BUILD/tern.pc"
    # every file must exist before anything is written
    manifest | while read -r mode src dest; do
        if [ "$mode" != link ] && [ ! -f "$src" ]; then
            echo "make install: $src is missing (run make first)" >&2
            exit 1
        fi
    done
    # every destination directory must be creatable and writable before anything is written
    for d in $(manifest | while read -r mode src dest; do echo "${dest%/*}"; done | sort -u); do
        mkdir -p "$DESTDIR$d" 2>/dev/null || fail_dir "$DESTDIR$d"
        [ -w "$DESTDIR$d" ] || fail_dir "$DESTDIR$d"
    done
    manifest | while read -r mode src dest; do
        if [ "$mode" = link ]; then
            ln -sfn "$src" "$DESTDIR$dest"
        else
            # a new file, then a rename: a running tern or a loaded libtern keeps its old inode
            install -m "$mode" "$src" "$DESTDIR$dest.tmp$$" && mv -f "$DESTDIR$dest.tmp$$" "$DESTDIR$dest"
        fi
        echo "  $DESTDIR$dest"
    done
    # the dynamic linker's cache, when installing for this system as root into a directory it knows
    if [ -z "$DESTDIR" ] && [ "$(id -u)" = 0 ] && command -v ldconfig >/dev/null 2>&1; then
        case $LIBDIR in /usr/local/lib|/usr/lib|/usr/lib64|/lib|/lib64) ldconfig || true;; esac
    fi
    echo "installed tern $VERSION under $DESTDIR$PREFIX"
    ;;
uninstall)
    list=$(mktemp)
    trap 'rm -f "$list"' EXIT
    manifest > "$list"
    # the man pages installed, whether or not this build folder has them
    for f in "$DESTDIR$MANDIR"/man1/tern.1 "$DESTDIR$MANDIR"/man1/tern-*.1; do
        [ -f "$f" ] && echo "644 - ${f#"$DESTDIR"}" >> "$list"
    done
    removed=0
    while read -r mode src dest; do
        if [ -e "$DESTDIR$dest" ] || [ -L "$DESTDIR$dest" ]; then
            rm -f "$DESTDIR$dest" && echo "  removed $DESTDIR$dest" && removed=$((removed + 1))
        fi
    done < "$list"
    # Tern's own directories, when empty (a model someone added by hand stays, with its folder)
    for d in "$DESTDIR$MODELDIR"/*/; do [ -d "$d" ] && rmdir "${d%/}" 2>/dev/null || true; done
    for d in "$MODELDIR" "$DATADIR/tern" "$DOCDIR"; do rmdir "$DESTDIR$d" 2>/dev/null || true; done
    if [ "$removed" = 0 ]; then
        echo "make uninstall: no file of tern under $DESTDIR$PREFIX (nothing to remove)"
    else
        echo "uninstalled tern $VERSION from $DESTDIR$PREFIX ($removed files)"
    fi
    ;;
*)
    echo "install.sh: install or uninstall, not '$action'" >&2
    exit 2
    ;;
esac
