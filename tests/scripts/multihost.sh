#!/bin/sh
# multihost.sh — one tp 2 × pp 2 run over two hosts must equal the same program run on one host.
#
#   sh tests/scripts/multihost.sh BUILD_DIR
#
# The two "hosts" are network namespaces made here (ip netns), joined by a veth pair on
# 10.231.0.0/24, each with its own loopback and, through a UTS namespace, its own host name
# (hostA, hostB): Open MPI then sees two nodes, and with --mca btl tcp,self every message between
# them crosses the veth. mpirun runs on hostA; its launcher reaches hostB through an rsh agent
# written here that runs the command with `ip netns exec` where a real cluster uses ssh. The
# namespaces share the file system, as nodes share one, so the stage directory and the data file
# are at the same path on both.
#
# Compiles examples/tiny.pdl with --tp 2 --pp 2 --microbatches 4, trains 2 steps on one host
# (4 ranks) and across the two namespaces (2 ranks each: stage 0's TP group on hostA, stage 1's
# on hostB), both with --seed 7 and the same --data file, and checks: where each rank ran and that
# bytes crossed the veth; the logged losses and gradient norms equal (every printed digit); the
# --save-grads files byte-identical (bitwise-equal gradients: the reduction order does not depend
# on where the ranks are). Where namespaces cannot be made (not root, no CAP_NET_ADMIN, no
# iproute2 or unshare), prints "SKIP multihost: <reason>" and counts nothing.
#
# Prints PASS/FAIL/SKIP lines, and last "N passed, M failed"; exits non-zero only on a failure.
# Every step has its own time limit (ppc 60 s, each mpirun 120 s): at most about 5 minutes in
# all; about 5 s when it passes. The namespaces, the veth and the temporary directory are removed
# on every exit.
set -u
build=${1:?usage: multihost.sh BUILD_DIR}
root=$(cd "$(dirname "$0")/../.." && pwd)
case $build in /*) ;; *) build=$(pwd)/$build ;; esac
ppc=$build/ppc
ppr=$build/ppr
pass=0
fail=0
done_=0
tag=pmh$$
nsa=${tag}A
nsb=${tag}B
ipa=10.231.0.1
ipb=10.231.0.2
net=10.231.0.0/24
tmp=""
made=""

ok() { pass=$((pass + 1)); echo "PASS multihost $1"; }
bad() { fail=$((fail + 1)); echo "FAIL multihost $1: $2"; }
summary() {
  [ "$done_" = 1 ] && return
  done_=1
  echo "$pass passed, $fail failed"
}
skip() {
  echo "SKIP multihost: $1"
  summary
  exit 0
}

# Remove what this run made: first end the processes still inside its namespaces (an mpirun
# cut off by its time limit can leave ranks or an orted there), then the namespaces (which takes
# the veth ends in them), then the temporary directory.
cleanup() {
  for ns in $made; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
  done
  for ns in $made; do ip netns del "$ns" 2>/dev/null; done
  ip link del "${tag}a" 2>/dev/null
  [ -n "$tmp" ] && rm -rf "$tmp"
}
trap 'cleanup' EXIT
trap 'bad run "interrupted"; summary; exit 1' INT TERM HUP

if [ ! -x "$ppc" ] || [ ! -x "$ppr" ]; then
  bad build "no $ppc or $ppr (make BUILD=$build first)"
  summary
  exit 1
fi
if ! command -v mpirun >/dev/null 2>&1; then
  bad setup "no mpirun (Debian: openmpi-bin)"
  summary
  exit 1
fi

# ---- what this machine allows ------------------------------------------------------------------
if ! command -v ip >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "multihost: installing iproute2"
    DEBIAN_FRONTEND=noninteractive timeout 300 sh -c \
      'apt-get update -qq >/dev/null && apt-get install -y -qq iproute2 >/dev/null' 2>/dev/null
  fi
  command -v ip >/dev/null 2>&1 || skip "no ip command (install iproute2: apt-get install iproute2)"
fi
command -v unshare >/dev/null 2>&1 || skip "no unshare command (install util-linux)"
command -v timeout >/dev/null 2>&1 || skip "no timeout command (install coreutils)"

tmp=$(mktemp -d)
for ns in "$nsa" "$nsb"; do
  if ! ip netns add "$ns" 2>"$tmp/err"; then
    why=$(head -n 1 "$tmp/err" | sed 's/.*: *//')
    skip "cannot create network namespaces here (ip netns add: ${why:-failed})"
  fi
  made="$made $ns"
done
if ! { ip link add "${tag}a" type veth peer name "${tag}b" &&
  ip link set "${tag}a" netns "$nsa" && ip link set "${tag}b" netns "$nsb" &&
  ip -n "$nsa" addr add "$ipa/24" dev "${tag}a" && ip -n "$nsb" addr add "$ipb/24" dev "${tag}b" &&
  ip -n "$nsa" link set lo up && ip -n "$nsb" link set lo up &&
  ip -n "$nsa" link set "${tag}a" up && ip -n "$nsb" link set "${tag}b" up; } 2>"$tmp/err"; then
  skip "cannot join the namespaces with a veth pair ($(head -n 1 "$tmp/err"))"
fi
if ! ip netns exec "$nsa" unshare --uts sh -c 'hostname hostA' 2>"$tmp/err"; then
  skip "cannot give a namespace its own host name (unshare --uts: $(head -n 1 "$tmp/err"))"
fi

# The rsh agent: Open MPI calls it as `AGENT HOST COMMAND...`, as it would call ssh; it runs the
# command (an orted) on that "host": in its namespace, under its host name, through a shell, as
# sshd would.
cat >"$tmp/netns-rsh" <<EOF
#!/bin/sh
host=\$1
shift
case \$host in
  $ipa) exec ip netns exec $nsa unshare --uts sh -c "hostname hostA; \$*" ;;
  $ipb) exec ip netns exec $nsb unshare --uts sh -c "hostname hostB; \$*" ;;
  *) echo "netns-rsh: no host \$host" >&2; exit 255 ;;
esac
EOF
# Each rank notes where it runs (host name, network namespace), then becomes ppr.
cat >"$tmp/where" <<'EOF'
#!/bin/sh
echo "$(hostname) $(ip netns identify $$ 2>/dev/null)" >"$WHERE_DIR/rank$OMPI_COMM_WORLD_RANK"
exec "$@"
EOF
chmod +x "$tmp/netns-rsh" "$tmp/where"
printf '%s slots=2\n%s slots=2\n' "$ipa" "$ipb" >"$tmp/hosts"
cp "$root/README.md" "$tmp/data.txt"
mkdir -p "$tmp/where.d"

# ---- compile, one host, two hosts --------------------------------------------------------------
if ! timeout 60 "$ppc" "$root/examples/tiny.pdl" --tp 2 --pp 2 --microbatches 4 -o "$tmp/stages" >"$tmp/ppc.out" 2>&1; then
  cat "$tmp/ppc.out"
  bad compile "ppc examples/tiny.pdl --tp 2 --pp 2 --microbatches 4 failed"
  summary
  exit 1
fi
args="--quiet --seed 7 --data $tmp/data.txt --steps 2"
mpi="--allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1"
# shellcheck disable=SC2086
timeout -k 10 120 mpirun $mpi -np 4 "$ppr" "$tmp/stages" $args \
  --log "$tmp/one.jsonl" --save-grads "$tmp/one.safetensors" >"$tmp/one.out" 2>&1
rc=$?
if [ "$rc" -ne 0 ]; then
  tail -n 30 "$tmp/one.out"
  bad one-host "the 4-rank run on one host failed (exit $rc; 124: timed out after 120 s)"
  summary
  exit 1
fi
tx0=$(ip netns exec "$nsa" cat "/sys/class/net/${tag}a/statistics/tx_bytes" 2>/dev/null || echo 0)
rx0=$(ip netns exec "$nsa" cat "/sys/class/net/${tag}a/statistics/rx_bytes" 2>/dev/null || echo 0)
# shellcheck disable=SC2086
timeout -k 10 120 ip netns exec "$nsa" unshare --uts sh -c 'hostname hostA; exec "$@"' sh \
  mpirun $mpi -np 4 --hostfile "$tmp/hosts" --mca plm rsh --mca plm_rsh_agent "$tmp/netns-rsh" \
  --mca btl tcp,self --mca btl_tcp_if_include "$net" --mca oob_tcp_if_include "$net" \
  -x WHERE_DIR="$tmp/where.d" "$tmp/where" "$ppr" "$tmp/stages" $args \
  --log "$tmp/two.jsonl" --save-grads "$tmp/two.safetensors" >"$tmp/two.out" 2>&1
rc=$?
if [ "$rc" -ne 0 ]; then
  tail -n 30 "$tmp/two.out"
  bad two-hosts "the run over the two namespaces failed (exit $rc; 124: timed out after 120 s)"
  summary
  exit 1
fi
tx1=$(ip netns exec "$nsa" cat "/sys/class/net/${tag}a/statistics/tx_bytes" 2>/dev/null || echo 0)
rx1=$(ip netns exec "$nsa" cat "/sys/class/net/${tag}a/statistics/rx_bytes" 2>/dev/null || echo 0)

# ---- checks ------------------------------------------------------------------------------------
place=""
for r in 0 1 2 3; do place="$place$(cat "$tmp/where.d/rank$r" 2>/dev/null || echo '? ?');"; done
want="hostA $nsa;hostA $nsa;hostB $nsb;hostB $nsb;"
kb=$(((tx1 - tx0 + rx1 - rx0) / 1024))
if [ "$place" = "$want" ] && [ "$kb" -gt 0 ]; then
  ok "placement: ranks 0 1 (stage 0) on hostA, ranks 2 3 (stage 1) on hostB; $kb KiB crossed the veth"
else
  bad placement "ranks ran at '$place' (want '$want'), $kb KiB crossed the veth"
fi

field() { sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p" "$2" | tr '\n' ' '; }
l1=$(field loss "$tmp/one.jsonl")
l2=$(field loss "$tmp/two.jsonl")
n1=$(field grad_norm "$tmp/one.jsonl")
n2=$(field grad_norm "$tmp/two.jsonl")
if [ "$(echo "$l1" | wc -w)" -eq 2 ] && [ "$l1" = "$l2" ] && [ "$n1" = "$n2" ]; then
  ok "losses: 2 steps equal to the one-host run, every printed digit (loss ${l1% }; grad norm ${n1% })"
else
  bad losses "two hosts: loss '$l2' grad norm '$n2'; one host: loss '$l1' grad norm '$n1'"
fi
if [ -s "$tmp/one.safetensors" ] && cmp -s "$tmp/one.safetensors" "$tmp/two.safetensors"; then
  ok "gradients: --save-grads byte-identical to the one-host run ($(wc -c <"$tmp/one.safetensors") bytes, bitwise-equal tensors)"
else
  bad gradients "--save-grads differs from the one-host run (or is missing)"
fi
summary
[ "$fail" -eq 0 ]
