#!/bin/sh
# Prints the real path of $1, which may not exist yet, following symlinks (dangling ones too)
# inside the container. Components below the deepest existing folder are printed as given.
p=$1; rest=; links=0
while :; do
  if [ -e "$p" ]; then real=$(readlink -f -- "$p") || exit 1; break; fi
  if [ -L "$p" ]; then
    links=$((links + 1)); [ $links -gt 40 ] && { echo "too many symlinks" >&2; exit 1; }
    target=$(readlink -- "$p")
    case $target in /*) p=$target ;; *) p=$(dirname -- "$p")/$target ;; esac
    continue
  fi
  rest=/$(basename -- "$p")$rest; p=$(dirname -- "$p")
done
printf '%s%s\n' "${real%/}" "$rest"
