#!/usr/bin/env bash
# A multi-host run without Kubernetes (docs/DESIGN.md, "Deployment"):
# every shard server and every worker in its own network namespace with its
# own address on one bridge, started with exactly the command, flags and
# config the rendered Kubernetes overlay gives its pods (tests/deploy/
# pod_plan.py reads them), over mutual TLS with development credentials whose
# SANs are the servers' DNS names. Midway one server's namespace is cut off
# twice: a partition (its link goes down and comes back) and a lost node (the
# server process dies while cut off and starts again fresh); the run must
# recover and finish every step: with the overlay's zeroshard.replicas 2
# (docs/DESIGN.md, "Replicas") without a worker restart, the server taking
# its copies back from a checkpoint each time it answers again; with one
# copy as docs/DESIGN.md "Crash recovery" says, rank 0 restoring every
# server from the newest checkpoint.
#
#   bash tests/deploy/multihost_run.sh BIN_DIR OVERLAY_DIR [IMAGE_ROOT]
#
# BIN_DIR holds zeroshard-server, -worker, -ctl. With IMAGE_ROOT (the root of
# the built server image, deploy/docker/image-root.sh) the servers run from
# the image's own root (chroot), proving the image holds what a pod needs.
#
# What differs from the pods, and why: the config's zeroshard.steps,
# checkpoint.every_steps, step timeout and LR warmup are shortened so the test takes
# about a minute; the kubelet's restart of a failed container
# (restartPolicy OnFailure) is a bounded loop here; names resolve through
# a hosts file bound over each pod's /etc/hosts instead of cluster DNS.
#
# Needs root, ip (iproute2), nsenter, python3 with yaml, openssl and kubectl; exits 77
# (skipped) with a message when one is missing. Every wait is bounded.
set -uo pipefail

SKIP=77
skip() { echo "multihost_run: SKIPPED: $*"; exit "$SKIP"; }
log() { echo "multihost_run: $(date -u +%H:%M:%S) $*"; }
die() { log "FAILED: $*"; exit 1; }

[ $# -ge 2 ] || { echo "usage: $0 BIN_DIR OVERLAY_DIR [IMAGE_ROOT]" >&2; exit 2; }
BIN=$(cd "$1" && pwd)
OVERLAY=$2
IMAGE_ROOT=${3:-${ZS_IMAGE_ROOT:-}}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
# A checkpoint every 4 steps: the two cuts follow checkpoints seen, and a
# checkpoint is left after them even when a step is fast enough that two
# land between the script's looks (with 12 steps, a run once wrote step 4
# and 8 within one look and ended at 12 after one cut). With one copy 16
# steps; with two, the workers leave a cut server within seconds and go on,
# so the run is 48 steps long (0.2-0.4 s each here), long enough for the
# server to come back and take its copies back after each cut (set below).
STEPS=${ZS_MULTIHOST_STEPS:-}
EVERY=${ZS_MULTIHOST_CKPT_EVERY:-4}
# The partition is shorter than the step timeout. With replicas the workers
# leave the silent server after about 4 s (a call waiting over a second,
# then a probe of 3 s unanswered: docs/DESIGN.md, "Replicas") and rank 0
# takes it back once its link is up; with one copy the calls in flight wait
# for the link.
STEP_S=${ZS_MULTIHOST_STEP_S:-30}
DOWN_S=${ZS_MULTIHOST_DOWN_S:-6}
DEADLINE_S=${ZS_MULTIHOST_DEADLINE_S:-400}

[ "$(id -u)" = 0 ] || skip "needs root (network namespaces)"
command -v ip >/dev/null || skip "ip (iproute2) is missing"
command -v nsenter >/dev/null || skip "nsenter (util-linux) is missing"
command -v kubectl >/dev/null || skip "kubectl is missing"
command -v openssl >/dev/null || skip "openssl is missing"
python3 -c 'import yaml' 2>/dev/null || skip "python3-yaml is missing"
for b in zeroshard-server zeroshard-worker zeroshard-ctl; do
  [ -x "$BIN/$b" ] || die "$BIN/$b is missing"
done
if [ -n "$IMAGE_ROOT" ]; then
  [ -x "$IMAGE_ROOT/usr/local/bin/zeroshard-server" ] ||
    die "$IMAGE_ROOT holds no /usr/local/bin/zeroshard-server"
fi

# Unique names: runs in parallel (or a stale earlier run) never collide.
ID=zs$$
NS_SW=$ID-sw
WORK=$(mktemp -d /tmp/zs-multihost.XXXXXX)
created_dirs=()
created_files=()
cleanup() {
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$ID-"); do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
  done
  jobs -p | xargs -r kill 2>/dev/null
  sleep 0.2
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$ID-"); do
    ip netns del "$ns" 2>/dev/null
  done
  for f in "${created_files[@]}"; do rm -f "$f"; done
  for ((i = ${#created_dirs[@]} - 1; i >= 0; i--)); do rmdir "${created_dirs[$i]}" 2>/dev/null; done
  if [ "${KEEP_WORK:-0}" != 1 ]; then rm -rf "$WORK"; fi
}
trap cleanup EXIT

# 1. The pods' plan, from the rendered overlay.
kubectl kustomize "$OVERLAY" >"$WORK/rendered.yaml" 2>"$WORK/kustomize.err" ||
  die "kubectl kustomize $OVERLAY: $(cat "$WORK/kustomize.err")"
python3 "$HERE/pod_plan.py" <"$WORK/rendered.yaml" >"$WORK/plan.json" || die "pod plan"
plan() { python3 -c "import json,sys; p=json.load(open('$WORK/plan.json')); $1"; }
S=$(plan 'print(p["servers"])')
R=$(plan 'print(p["ds_config"]["zeroshard"].get("replicas", 1))')
N=$(plan 'print(p["workers"])')
[ -n "$STEPS" ] || STEPS=$([ "$R" = 2 ] && echo 48 || echo 16)
log "overlay $OVERLAY: $S servers, $N workers; servers from ${IMAGE_ROOT:+the image root }${IMAGE_ROOT:-$BIN}"

# 2. The config the ConfigMap holds, with the run shortened (see above).
mkdir -p "$WORK/config" "$WORK/ckpt" "$WORK/credentials"
plan "
c = p['ds_config']; z = c['zeroshard']
z['steps'] = $STEPS
z.setdefault('checkpoint', {})['every_steps'] = $EVERY
z.setdefault('timeouts', {})['step_seconds'] = $STEP_S
sched = c.get('scheduler', {}).get('params', {})
if 'warmup_num_steps' in sched:
    sched['warmup_num_steps'] = min(sched['warmup_num_steps'], $STEPS // 4)
json.dump(c, open('$WORK/config/ds_config.json', 'w'), indent=1)
print(' '.join(z['servers']))" >"$WORK/servers.txt" || die "config"
read -r -a SERVER_ADDRS <"$WORK/servers.txt"
[ "${#SERVER_ADDRS[@]}" = "$S" ] ||
  die "the config lists ${#SERVER_ADDRS[@]} servers, the StatefulSet has $S replicas"

# 3. Credentials whose server certificate names every server's DNS name.
sans=()
for a in "${SERVER_ADDRS[@]}"; do sans+=("DNS:${a%:*}"); done
bash "$REPO/scripts/make-dev-credentials.sh" "$WORK/credentials" "${sans[@]}" \
  >/dev/null 2>&1 || die "make-dev-credentials"

# 4. The network: a switch namespace with a bridge, one namespace per pod.
# `ip -n NS` and `ip netns exec` remount / as a slave, which the kernel
# refuses where / is not a mount point (a chroot such as CI's fresh root);
# nsenter enters only the network namespace.
nsip() { nsenter --net="/run/netns/$1" ip "${@:2}"; }
ip netns add "$NS_SW" || skip "cannot make network namespaces here"
nsip "$NS_SW" link add br0 type bridge
nsip "$NS_SW" link set br0 up
hosts_file="$WORK/hosts"
echo "127.0.0.1 localhost" >"$hosts_file"
pod_ns() { echo "$ID-$1"; }
add_host() {  # POD IP
  local ns; ns=$(pod_ns "$1")
  ip netns add "$ns"
  ip link add "$ID$1" type veth peer name "p$ID$1"
  ip link set "$ID$1" netns "$ns"
  ip link set "p$ID$1" netns "$NS_SW"
  nsip "$NS_SW" link set "p$ID$1" master br0 up
  nsip "$ns" link set "$ID$1" name eth0
  nsip "$ns" addr add "$2/24" dev eth0
  nsip "$ns" link set eth0 up
  nsip "$ns" link set lo up
}
for ((k = 0; k < S; k++)); do
  add_host "s$k" "10.77.0.$((10 + k))"
  echo "10.77.0.$((10 + k)) ${SERVER_ADDRS[$k]%:*}" >>"$hosts_file"
done
for ((r = 0; r < N; r++)); do add_host "w$r" "10.77.0.$((100 + r))"; done
# Each pod sees $hosts_file as /etc/hosts (bound in its own mount namespace).
if [ ! -e /etc/hosts ]; then touch /etc/hosts && created_files+=(/etc/hosts); fi
# A pod's mount namespace is made private, unless / is not a mount point (a
# chroot, such as CI's fresh root, inside a namespace already private), where
# the kernel refuses to change its propagation (and `ip netns exec`, which
# tries, fails): there the new namespace's mounts are private already.
PROPAGATION=private
mountpoint -q / || PROPAGATION=unchanged

# 5. Mount points the pods' volumes use, made (and removed) when missing.
ensure_dir() {
  local d=$1 parts="" part
  IFS=/ read -r -a parts_arr <<<"${d#/}"
  for part in "${parts_arr[@]}"; do
    parts="$parts/$part"
    if [ ! -d "$parts" ]; then mkdir "$parts" && created_dirs+=("$parts"); fi
  done
}
# Which host directory backs each volume, by the volume's name: the Secret,
# the ConfigMap and the checkpoint PVC are shared by every pod; any other
# volume (the workers' emptyDir) is the pod's own.
volume_source() {  # POD VOLUME_NAME
  case "$2" in
    credentials) echo "$WORK/credentials" ;;
    config) echo "$WORK/config" ;;
    checkpoints) echo "$WORK/ckpt" ;;
    *) echo "$WORK/$1-vol-$2" ;;
  esac
}

# Runs one pod's container: in its namespace, with its volumes bound at the
# manifest's paths (a private mount namespace: nothing reaches the host),
# from the image's root when given (servers only).
run_container() {  # POD WHICH(server|worker|init:I) RANK_OR_INDEX LOGFILE
  local pod=$1 which=$2 index=$3 logf=$4
  local ns; ns=$(pod_ns "$pod")
  # The container's entry in the plan: p["server"], p["worker"] or
  # p["worker_init"][I].
  local sel="p['$which']"
  case "$which" in init:*) sel="p['worker_init'][${which#init:}]";; esac
  local cmd_json; cmd_json=$(plan "print(json.dumps($sel['command']))")
  local mounts; mounts=$(plan "print(' '.join(k + '=' + v for k, v in $sel['mounts'].items()))")
  local env_json; env_json=$(plan "print(json.dumps($sel['env']))")
  local root=/
  if [ "$which" = server ] && [ -n "$IMAGE_ROOT" ]; then root=$IMAGE_ROOT; fi
  local script="$WORK/run-$pod-$(echo "$which" | tr : _).sh"
  {
    echo "set -e"
    for vm in $mounts; do
      local m=${vm#*=} src; src=$(volume_source "$pod" "${vm%%=*}")
      mkdir -p "$src"
      if [ "$root" = / ]; then
        echo "mount --bind '$src' '$m'"
      else
        # The image (read-only) may lack the mount point: a tmpfs over its
        # nearest existing parent (never /) makes room for it, as the
        # container runtime does.
        echo "if [ ! -d '$root$m' ]; then a=\$(dirname '$m'); while [ ! -d '$root'\$a ]; do a=\$(dirname \$a); done; [ \$a != / ]; mountpoint -q '$root'\$a || mount -t tmpfs tmpfs '$root'\$a; mkdir -p '$root$m'; fi"
        echo "mount --bind '$src' '$root$m'"
      fi
    done
    if [ "$root" = / ]; then
      echo "mount --bind '$hosts_file' /etc/hosts"
    elif [ -e "$root/etc/hosts" ]; then
      echo "mount --bind '$hosts_file' '$root/etc/hosts'"
    fi
    if [ "$root" != / ]; then
      echo "mount -t proc proc '$root/proc'"
      echo "mount --rbind /dev '$root/dev'"
      echo "mount -t tmpfs tmpfs '$root/tmp'"
    fi
    # $(RANK)-style references are the kubelet's substitution of env vars.
    python3 - "$cmd_json" "$index" "$pod" "$root" "$env_json" <<'PY'
import json, shlex, sys
argv = json.loads(sys.argv[1]); index, pod, root = sys.argv[2], sys.argv[3], sys.argv[4]
env = dict(json.loads(sys.argv[5]))
# A StatefulSet's pods are named <set>-<ordinal>; a Job's <job>-<index>-<hash>.
host = ("zeroshard-server-" + index) if pod.startswith("s") else \
    ("zeroshard-worker-%s-x" % index)
env.update({"RANK": index, "JOB_COMPLETION_INDEX": index, "HOSTNAME": host})
for k, v in env.items():
    argv = [a.replace("$(%s)" % k, v) for a in argv]
prefix = "" if root == "/" else "chroot " + shlex.quote(root) + " "
envs = " ".join("%s=%s" % (k, shlex.quote(v)) for k, v in env.items())
print("exec env %s %s%s" % (envs, prefix, " ".join(shlex.quote(a) for a in argv)))
PY
  } >"$script"
  PATH="$BIN:$PATH" nsenter --net="/run/netns/$ns" \
    unshare --mount --propagation "$PROPAGATION" bash "$script" >>"$logf" 2>&1
}

# The kubelet's restartPolicy OnFailure, bounded: a failed container starts
# again (after a short back-off) until it succeeds or the budget is spent.
supervise() {  # POD WHICH INDEX MAX_RESTARTS
  local pod=$1 which=$2 index=$3 max=$4 n=0 rc
  local logf="$WORK/$pod.log"
  while :; do
    echo "=== start $n $(date -u +%T)" >>"$logf"
    # (stderr: the shell's own "Killed" notice when cleanup kills a pod)
    { run_container "$pod" "$which" "$index" "$logf"; } 2>/dev/null
    rc=$?
    echo "=== exit $rc $(date -u +%T)" >>"$logf"
    [ "$rc" = 0 ] && return 0
    n=$((n + 1))
    [ "$n" -gt "$max" ] && return "$rc"
    sleep 2
  done
}

# The mount points, made here (not in the pods' subshells) so that cleanup
# knows which it made.
for m in $(plan "print(' '.join(sorted({v for c in [p['server'], p['worker']] + p.get('worker_init', []) for v in c['mounts'].values()})))"); do
  ensure_dir "$m"
done

# 6. The servers, then the workers (init containers first, as a pod does).
for ((k = 0; k < S; k++)); do
  supervise "s$k" server "$k" 5 &
done
n_init=$(plan "print(len(p.get('worker_init', [])))")
worker_pod() {
  local r=$1 i
  for ((i = 0; i < n_init; i++)); do
    run_container "w$r" "init:$i" "$r" "$WORK/w$r.log" || return 1
  done
  supervise "w$r" worker "$r" 8
}
declare -A wpid
for ((r = 0; r < N; r++)); do
  worker_pod "$r" &
  wpid[$r]=$!
done

# 7. Two cuts, each once a new checkpoint exists. First a partition: one
#    server's link goes down and comes back, the server keeps its state, and
#    the run must go on without losing a step. Then the node is lost: the
#    link goes down, the server process dies while cut off and its container
#    starts again fresh (as a rescheduled pod). With replicas the workers go
#    on from the other copies (the partitioned server is left after about
#    4 s, and taken back once its link is up), and the lost server takes its copies back (rank 0's checkpoint
#    of the step, then restore) once it answers again; with one copy the workers fail, restart with --attempt=auto, and
#    rank 0 restores every server from the newest checkpoint
#    (--resume=/ckpt).
victim=$((S - 1))
start=$(date +%s)
cuts=0
ckpt_seen=""
checkpoints() { ls -d "$WORK"/ckpt/step-*/MANIFEST.json 2>/dev/null | sort; }
while :; do
  now=$(date +%s)
  [ $((now - start)) -lt "$DEADLINE_S" ] || die "not done in $DEADLINE_S s (logs: KEEP_WORK=1)"
  if ! kill -0 "${wpid[0]}" 2>/dev/null; then break; fi
  newest=$(checkpoints | tail -1)
  # With replicas, the lost node waits until the partitioned server has
  # taken its copies back, so that both returns are seen.
  back_now=$(grep -c "server $victim (.*) took its copies back" "$WORK/w0.log" 2>/dev/null)
  if [ "$cuts" -lt 2 ] && [ -n "$newest" ] && [ "$newest" != "$ckpt_seen" ] &&
     { [ "$cuts" = 0 ] || [ "$R" != 2 ] || [ "${back_now:-0}" -ge 1 ]; }; then
    ckpt_seen=$newest
    vns=$(pod_ns "s$victim")
    step_dir=$(basename "$(dirname "$newest")")
    nsip "$vns" link set eth0 down
    if [ "$cuts" = 0 ]; then
      log "$step_dir written; server $victim's link goes down for $DOWN_S s (a partition)"
    else
      log "$step_dir written; server $victim's link goes down and its process dies (a lost node)"
      for p in $(ip netns pids "$vns"); do
        [ "$(cat "/proc/$p/comm" 2>/dev/null)" = zeroshard-serve ] && kill -9 "$p"
      done
    fi
    sleep "$DOWN_S"
    nsip "$vns" link set eth0 up
    log "server $victim's link is up again"
    cuts=$((cuts + 1))
  fi
  sleep 0.2
done
wait "${wpid[0]}"
rc0=$?
for ((r = 1; r < N; r++)); do wait "${wpid[$r]}" || true; done

for f in "$WORK"/*.log; do
  echo "----- $(basename "$f") (last lines)"
  tail -n 8 "$f"
done
[ "$rc0" = 0 ] || die "worker 0 failed (exit $rc0)"
[ "$cuts" = 2 ] || die "the run finished after $cuts cut(s); both were not tried (more steps?)"
server_restarts=$(grep -c '^=== start [1-9]' "$WORK/s$victim.log")
[ "$server_restarts" -ge 1 ] || die "server $victim's container never started again"
last=$(grep -o '"event":"done"[^}]*' "$WORK/w0.log" | tail -1)
echo "$last" | grep -q "\"step\":$STEPS" || die "worker 0 did not report step $STEPS done: $last"
restarts=$(grep -c '^=== exit [1-9]' "$WORK"/w*.log | awk -F: '{s += $2} END {print s + 0}')
if [ "$R" = 2 ]; then
  [ "$restarts" = 0 ] || die "with replicas a worker container restarted $restarts time(s)"
  back=$(grep -c "server $victim (.*) took its copies back" "$WORK/w0.log")
  [ "$back" -ge 2 ] ||
    die "server $victim took its copies back $back time(s), not after both the partition and the lost node (a longer run: ZS_MULTIHOST_STEPS)"
  how="no worker restart; the server took its copies back $back time(s): $(grep -o "took its copies back at step [0-9]*" "$WORK/w0.log" | tr '\n' ';')"
else
  grep -q "restored $S servers from" "$WORK/w0.log" ||
    die "rank 0 never restored the servers from a checkpoint after the lost node"
  how="worker container restarts $restarts, restored: $(grep -o "restored $S servers from[^;]*" "$WORK/w0.log" | tail -1)"
fi
log "PASSED: $STEPS steps over $S servers ($R copies of each slot) and $N workers in their own namespaces, TLS on; server $victim partitioned for $DOWN_S s, then lost and restarted: $how"
