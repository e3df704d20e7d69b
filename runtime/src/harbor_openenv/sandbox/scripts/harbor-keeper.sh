#!/bin/sh
# The keeper's requests where the runtime's helper cannot be PID 1 (Harbor's backends), run as root
# through the backend's exec; prints the keeper's answer without its id (see keep.c):
#   mark                              "ok PID:START..." (every process but this shell)
#   stop BASELINE [VUSER VDIR TDIR stage|keep]
# stop kills every process outside BASELINE (mark's PID:START list, comma-separated) but this
# shell and its ancestors, until none is left (at most 20 s, else code 97), then makes VDIR anew
# for VUSER alone (mode 0755) and empties TDIR ("stage") or makes TDIR/test.sh executable ("keep")
# (code 98 on failure). It runs the environment's own sh, kill and rm: see docs/design/security.md
# for what that leaves to an agent.
me=$$

# START: the start time of process $1 (field 22 of its stat); STATE its state. Fails once gone.
stat_of() {
  line=
  read -r line 2>/dev/null <"/proc/$1/stat" || return 1
  set -- ${line##*) }
  STATE=$1
  shift 19
  START=$1
}

# Whether process $1 (just read by stat_of) still runs: a zombie leader with live threads does.
alive() {
  [ "$STATE" != Z ] && return 0
  set -- "/proc/$1/task/"*
  [ $# -gt 1 ]
}

if [ "$1" = mark ]; then
  out=ok
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    [ "$p" = "$me" ] && continue
    stat_of "$p" && out="$out $p:$START"
  done
  echo "$out"
  exit 0
fi

[ "$1" = stop ] || { echo "err 2 unknown request: $1"; exit 0; }
keep=" $(echo "$2" | tr , ' ') "
p=$me
while [ "$p" -gt 1 ] 2>/dev/null; do # this shell's ancestors carry its output
  stat_of "$p" && keep="$keep$p:$START "
  ppid=
  while read -r key value rest; do [ "$key" = PPid: ] && ppid=$value; done <"/proc/$p/status"
  p=$ppid
done
tries=0
while :; do
  left=
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    [ "$p" = "$me" ] && continue
    stat_of "$p" || continue
    case $keep in *" $p:$START "*) continue ;; esac
    alive "$p" || continue
    kill -KILL "$p" 2>/dev/null
    left="$left $p"
  done
  [ -z "$left" ] && break
  tries=$((tries + 1))
  if [ "$tries" -ge 200 ]; then
    echo "err 97 processes still alive after 20 s:$left"
    exit 0
  fi
  sleep 0.1
done
[ $# -ge 6 ] || { echo ok; exit 0; }
vuser=${3:-0} vdir=$4 tdir=$5
parent=${vdir%/*}
{ [ -d "$parent" ] && [ ! -L "$parent" ]; } || { rm -rf -- "$parent" && mkdir -p -- "$parent"; }
if ! problem=$(rm -rf -- "$vdir" 2>&1 && mkdir -m 0755 -- "$vdir" 2>&1 &&
  chown -- "$vuser" "$vdir" 2>&1); then
  echo "err 98 cannot create $vdir: $problem"
  exit 0
fi
if [ "$6" = stage ]; then
  problem=$(rm -rf -- "$tdir" 2>&1 && mkdir -p -- "$tdir" 2>&1) || {
    echo "err 98 cannot empty $tdir: $problem"
    exit 0
  }
elif [ -e "$tdir/test.sh" ]; then
  chmod +x -- "$tdir/test.sh"
fi
echo ok
