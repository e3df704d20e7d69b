#!/bin/sh
# One agent file action (read/write/list of $4 in the real folder $2 below the real workdir $1),
# safe against the agent's processes swapping folders for symlinks meanwhile: the folder is entered
# one component at a time with `cd -P` (created first for a write) and its physical path checked
# after every step; the action then works relative to the shell's working directory, a handle no
# later rename can redirect. A read checks the file it actually opened (/proc/$$/fd/3) and prints
# at most $5 bytes of it in base64; a write copies standard input into the file in place, so an
# existing file keeps its mode, owner and group, and a new one gets the exec's umask (022). It runs
# as the agent's user.
# Exit 3: outside the workdir; 4: missing; 5: a directory; 6: not a regular file.
root=${1%/}/; rel=${2#"$1"}; op=$3; name=$4
inside() { case "${1%/}/" in "$root"*) ;; *) exit 3 ;; esac; }
cd -P -- "$1" 2>/dev/null || exit 4
inside "$PWD"
set -f; IFS=/
for c in $rel; do
  [ -n "$c" ] || continue
  if [ "$op" = write ] && [ ! -e "$c" ] && [ ! -L "$c" ]; then mkdir -- "$c" 2>/dev/null; fi
  cd -P -- "$c" 2>/dev/null || exit 4
  inside "$PWD"
done
set +f; unset IFS
case $op in
list)
  if [ -d "$name" ] && [ ! -L "$name" ]; then
    cd -P -- "$name" || exit 4; inside "$PWD"; exec ls -la
  fi
  exec ls -lad -- "$name" ;;  # anything else: the entry itself, never what it may point to
read)
  [ -e "$name" ] || exit 4
  [ -d "$name" ] && exit 5
  [ -f "$name" ] || exit 6
  exec 3< "$name" || exit 4
  inside "$(readlink /proc/$$/fd/3)"
  [ -f /proc/$$/fd/3 ] || exit 6
  head -c "$5" <&3 | base64 ;;
write)
  [ -L "$name" ] && exit 6
  [ -d "$name" ] && exit 5
  [ ! -e "$name" ] || [ -f "$name" ] || exit 6
  exec cat > "$name" ;;
esac
