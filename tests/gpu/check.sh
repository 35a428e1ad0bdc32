#!/bin/sh
# check.sh — make gpu-check: the first run of ppr on a GPU, in one command, under 8 minutes.
#
#   sh tests/gpu/check.sh [BUILD_DIR]
#
# Prints one table (Markdown): the PyTorch fixtures on --device cuda (the limits of the cpu run),
# tiny on two ranks sharing the GPU (pp 2, tp 2 and cp 2) against the one-rank cpu run, and GPT-2 124M
# (examples/gpt2.pdl, micro-batch 8, seq 1024) in tokens/s and MFU, in fp32, with --tf32 and in
# bf16 (--precision bf16: cuBLASLt's bf16 GEMMs), bf16 again with --lt-epilogues (GELU and its
# gradient inside the GEMMs, first checked on tiny GPT-2 against the unfused run) and with the
# vocabulary unpadded (--vocab-pad 1: the head's GEMMs 50257 wide, not 50304); llm.c's train_gpt2cu
# on the same GPU at the same shapes (../shared/peers/llm.c) and ppr's bf16 tokens/s against it;
# tiny in bf16 on cuda against bf16 on cpu; the fused attention's forward and backward per layer at
# GPT-2's shapes against the GEMM path's. After the table, the bf16 step's GEMM shapes by time.
# Without a GPU it says what is missing and exits 1. Not part of make test.
set -u
build=${1:-build}
cd "$(dirname "$0")/../.."
work=$build/gpu-check
rm -rf "$work" && mkdir -p "$work"
MPIRUN="mpirun --oversubscribe --allow-run-as-root -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1"

# ---- is there a GPU ppr can use? --------------------------------------------------------------
if ! "$build/ppc" examples/tiny.pdl -o "$work/probe" >"$work/probe.log" 2>&1; then
  echo "gpu-check: ppc failed:"; cat "$work/probe.log"; exit 1
fi
if ! grep -q '^cuda sm_[0-9]* [0-9a-f]' "$work/probe/rank0.prog"; then
  echo "gpu-check: ppc was built without the CUDA toolkit (no cubins: 'cuda ... - - - -'); build on a machine with it"
  exit 1
fi
if ! timeout 120 "$build/ppr" "$work/probe" --device cuda --steps 1 >"$work/probe.out" 2>&1; then
  echo "gpu-check: no GPU here, nothing was run:"
  sed 's/^/  /' "$work/probe.out"
  exit 1
fi
gpu=$(sed -n 's/.* bytes on \(cuda:[0-9]* ([^)]*)\).*/\1/p' "$work/probe.out" | head -n 1)

rows=""
row() { rows="$rows| $1 | $2 | $3 |
"; }
status=0

# ---- the PyTorch fixtures on cuda ---------------------------------------------------------------
timeout 180 env PPC_TEST_DEVICES=cuda "$build/test_fixtures" >"$work/fixtures.txt" 2>&1
last=$(tail -n 1 "$work/fixtures.txt")
worst=$(grep -o 'worst [0-9.e+-]* ([^)]*)' "$work/fixtures.txt" | sort -t' ' -k2 -g | tail -n 1)
case "$last" in [1-9]*" passed, 0 failed") r=PASS ;; *) r=FAIL; status=1 ;; esac
row "PyTorch fixtures (tiny MiniMind, tiny GPT-2) on cuda, the cpu limits" "$r: $last" "largest tensor error: ${worst:-?}"

# ---- two ranks on one GPU against the one-rank cpu run ------------------------------------------
timeout 180 env PPC_TEST_GPU=1 "$build/test_pipeline" >"$work/pipeline.txt" 2>&1
grep -E '^(PASS|FAIL) (tiny|a )' "$work/pipeline.txt" >"$work/pipeline.rows"
while IFS= read -r l; do
  r=${l%% *}; d=${l#* }
  [ "$r" = PASS ] || status=1
  row "${d%%:*}, against the one-rank cpu run" "$r" "${d#*: }"
done <"$work/pipeline.rows"
tail -n 1 "$work/pipeline.txt" | grep -q '^[1-9][0-9]* passed, 0 failed$' || { status=1; row "two ranks on one GPU" "FAIL" "$(tail -n 3 "$work/pipeline.txt" | tr '\n' ' ')"; }

# ---- bf16: tiny's first step on cuda against the cpu (cuBLASLt sums in its own order: 1e-4) ---------
d=tests/fixtures/tiny_minimind
if "$build/ppc" examples/tiny.pdl --precision bf16 -o "$work/tiny_bf16" >"$work/tiny_bf16.log" 2>&1; then
  for dev in cpu cuda; do
    rm -f "$work/tiny_bf16_$dev.jsonl" # a new run's log
    timeout 120 "$build/ppr" "$work/tiny_bf16" --device $dev --init $d/weights.safetensors --data $d/tokens.bin \
      --steps 1 --quiet --log "$work/tiny_bf16_$dev.jsonl" >"$work/tiny_bf16_$dev.out" 2>&1
  done
  lc=$(sed -n 's/.*"loss":\([0-9.e+-]*\).*/\1/p' "$work/tiny_bf16_cpu.jsonl")
  lg=$(sed -n 's/.*"loss":\([0-9.e+-]*\).*/\1/p' "$work/tiny_bf16_cuda.jsonl")
  if [ -n "$lc" ] && [ -n "$lg" ] && awk -v a="$lg" -v b="$lc" 'BEGIN { d = a - b; exit !((d < 0 ? -d : d) <= 1e-4 * b) }'; then
    row "tiny bf16 on cuda, step-1 loss against bf16 on cpu (1e-4)" "PASS" "cuda $lg, cpu $lc"
  else
    status=1; row "tiny bf16 on cuda, step-1 loss against bf16 on cpu (1e-4)" "FAIL" "cuda ${lg:-$(tail -n 1 "$work/tiny_bf16_cuda.out")}, cpu ${lc:-?}"
  fi
else
  status=1; row "tiny bf16" "FAIL" "ppc: $(tail -n 1 "$work/tiny_bf16.log")"
fi

# ---- GEMM epilogues inside cuBLASLt (--lt-epilogues) against the GEMM and then its kernel ---------
# tiny GPT-2 (gemm epi:gelu and epi:dgelu), fp32 and bf16, three steps from the fixture's weights:
# the same losses to rounding (fp32 1e-5; bf16 1e-3: cuBLASLt rounds GELU's input once, after the bias)
d=tests/fixtures/tiny_gpt2
for prec in fp32 bf16; do
  if "$build/ppc" tests/models/tiny_gpt2.pdl --precision $prec -o "$work/tg2_$prec" >"$work/tg2.log" 2>&1 &&
    grep -q 'epi:dgelu' "$work/tg2_$prec/rank0.prog"; then
    for lt in off on; do
      flag=""; [ $lt = on ] && flag=--lt-epilogues
      rm -f "$work/tg2_${prec}_$lt.jsonl"
      timeout 120 "$build/ppr" "$work/tg2_$prec" --device cuda $flag --init $d/weights.safetensors --data $d/tokens.bin \
        --steps 3 --quiet --log "$work/tg2_${prec}_$lt.jsonl" >"$work/tg2_${prec}_$lt.out" 2>&1
    done
    a=$(sed -n 's/.*"loss":\([0-9.e+-]*\).*/\1/p' "$work/tg2_${prec}_off.jsonl" | tail -n 1)
    b=$(sed -n 's/.*"loss":\([0-9.e+-]*\).*/\1/p' "$work/tg2_${prec}_on.jsonl" | tail -n 1)
    tol=1e-5; [ $prec = bf16 ] && tol=1e-3
    what="tiny GPT-2 $prec on cuda, step-3 loss with --lt-epilogues against without ($tol)"
    if [ -n "$a" ] && [ -n "$b" ] && awk -v a="$a" -v b="$b" -v t=$tol 'BEGIN { d = a - b; exit !((d < 0 ? -d : d) <= t * a) }'; then
      row "$what" "PASS" "with $b, without $a"
    else
      status=1; row "$what" "FAIL" "with ${b:-$(tail -n 1 "$work/tg2_${prec}_on.out")}, without ${a:-$(tail -n 1 "$work/tg2_${prec}_off.out")}"
    fi
  else
    status=1; row "tiny GPT-2 $prec with --lt-epilogues" "FAIL" "ppc: $(tail -n 1 "$work/tg2.log") (or no epi: in its listing)"
  fi
done

# ---- GPT-2 124M throughput ------------------------------------------------------------------------
# model FLOPs per token: 6 N (matrices, forward and backward) + 12 L S H (attention scores and values)
N=124439808; L=12; H=768; S=1024; B=8
if "$build/ppc" examples/gpt2.pdl --micro-batch $B --seq $S --microbatches 1 -o "$work/gpt2" >"$work/gpt2.log" 2>&1 &&
  "$build/ppc" examples/gpt2.pdl --micro-batch $B --seq $S --microbatches 1 --precision bf16 -o "$work/gpt2_bf16" \
    >>"$work/gpt2.log" 2>&1 &&
  "$build/ppc" examples/gpt2.pdl --micro-batch $B --seq $S --microbatches 1 --precision bf16 --vocab-pad 1 \
    -o "$work/gpt2_bf16_v1" >>"$work/gpt2.log" 2>&1; then
  # bf16-v1: the vocabulary unpadded (50257 columns, as before --vocab-pad), beside the default 50304
  for mode in fp32 tf32 bf16 bf16-lt bf16-v1; do
    flag=""; [ $mode = tf32 ] && flag=--tf32; [ $mode = bf16-lt ] && flag=--lt-epilogues
    dir=$work/gpt2; case $mode in bf16*) dir=$work/gpt2_bf16 ;; esac
    [ $mode = bf16-v1 ] && dir=$work/gpt2_bf16_v1
    rm -f "$work/gpt2_$mode.jsonl"
    timeout 300 "$build/ppr" "$dir" --device cuda $flag --steps 12 --log "$work/gpt2_$mode.jsonl" \
      >"$work/gpt2_$mode.out" 2>&1
    tps=$(sed -n '5,$s/.*"tokens_per_s":\([0-9.]*\).*/\1/p' "$work/gpt2_$mode.jsonl" | sort -g | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]}')
    if [ -z "$tps" ]; then
      status=1; row "GPT-2 124M, B $B, S $S, $mode" "FAIL" "$(tail -n 2 "$work/gpt2_$mode.out" | tr '\n' ' ')"; continue
    fi
    # the GPU's dense peak (TFLOPS): fp32 on CUDA cores, TF32 and bf16 on tensor cores
    peak=$(echo "$gpu" | awk -v m=${mode%-*} '
      /H200|H100/ && /SXM|HBM3|H200/ { print (m == "fp32" ? 67 : m == "tf32" ? 495 : 989); exit }
      /H100/  { print (m == "fp32" ? 51 : m == "tf32" ? 378 : 756); exit }
      /A100/  { print (m == "fp32" ? 19.5 : m == "tf32" ? 156 : 312); exit }
      /L40S/  { print (m == "fp32" ? 91.6 : m == "tf32" ? 183 : 362); exit }
      /4090/  { print (m == "fp32" ? 82.6 : m == "tf32" ? 82.6 : 165); exit }')
    mfu=$(awk -v t="$tps" -v n=$N -v l=$L -v h=$H -v s=$S -v p="${peak:-0}" 'BEGIN {
      f = (6 * n + 12 * l * s * h) * t; if (p > 0) printf "MFU %.1f%% of %g TFLOPS (%.1f TFLOPS)", 100 * f / (p * 1e12), p, f / 1e12;
      else printf "%.1f TFLOPS (peak of this GPU unknown)", f / 1e12 }')
    row "GPT-2 124M, B $B, S $S, $mode, step median of steps 4-12" "$tps tok/s" "$mfu"
    [ $mode = bf16 ] && tps_bf16=$tps
  done
else
  status=1; row "GPT-2 124M" "FAIL" "ppc: $(tail -n 1 "$work/gpt2.log")"
fi

# ---- llm.c side by side: its GPT-2 124M in bf16 at the same B and S on this GPU, in this run ------
# ../shared/peers/llm.c (or shared/peers/llm.c in the tree): build.sh builds train_gpt2cu with nvcc (or LLMC_OUT names a folder it
# built elsewhere), run.sh prints the median tok/s of its steps 10-30 ("llm.c tok/s N")
llmc=${LLMC_PEER:-$( [ -d ../shared/peers/llm.c ] && echo ../shared/peers/llm.c || echo shared/peers/llm.c )}
sm=$(sed -n 's/^cuda sm_\([0-9]*\) .*/\1/p' "$work/probe/rank0.prog" | head -n 1)
if [ -f "$llmc/run.sh" ]; then
  out=${LLMC_OUT:-$work/llmc}
  if [ -x "$out/train_gpt2cu" ] || timeout 600 sh "$llmc/build.sh" "$out" "${sm:-90}" >"$work/llmc_build.out" 2>&1; then
    ltps=$(timeout 300 sh "$llmc/run.sh" "$out" 2>"$work/llmc_run.err" | sed -n 's/^llm.c tok\/s \([0-9.]*\)$/\1/p')
    if [ -n "$ltps" ] && [ -n "${tps_bf16:-}" ]; then
      row "llm.c train_gpt2cu, GPT-2 124M bf16, B $B, S $S, median of steps 10-30, beside ppr's bf16 row" "$ltps tok/s" \
        "ppr/llm.c $(awk -v p="$tps_bf16" -v l="$ltps" 'BEGIN {printf "%.2f", p / l}') (ppr $tps_bf16 tok/s)"
    else
      status=1; row "llm.c side by side" "FAIL" "llm.c ${ltps:-did not run: $(tail -n 2 "$out/run_train_gpt2cu.log" 2>/dev/null | tr '\n' ' ')}, ppr bf16 ${tps_bf16:-did not run}"
    fi
  else
    status=1; row "llm.c side by side" "FAIL" "build.sh: $(tail -n 3 "$work/llmc_build.out" | tr '\n' ' ')"
  fi
else
  status=1; row "llm.c side by side" "FAIL" "no llm.c at $llmc (LLMC_PEER names its folder)"
fi

# ---- attention: fused kernels against GEMMs around softmax kernels, GPT-2 124M shapes ---------------
# PPR_PROFILE's per-step times: the fused path's attention_* kernels; the GEMM path's batched
# products (attention's alone are batched) and its attention_* softmax kernels; per layer
if "$build/ppc" examples/gpt2.pdl --micro-batch $B --seq $S --microbatches 1 --precision bf16 --attention gemm \
    -o "$work/gpt2_bf16_gemm" >>"$work/gpt2.log" 2>&1; then
  for path in fused gemm; do
    dir=$work/gpt2_bf16; [ $path = gemm ] && dir=$work/gpt2_bf16_gemm
    timeout 300 env PPR_PROFILE=1 "$build/ppr" "$dir" --device cuda --steps 6 >"$work/att_$path.out" 2>"$work/att_$path.prof"
  done
  ms() { # the profile's attention milliseconds a step: attention_* kernels, and batched GEMMs
    awk '/^  gemm:/ {g = 1; next} /^  kernels:/ {g = 0; k = 1; next} /^  the [0-9]+ slowest/ {k = 0}
      g && $1 ~ /^(forward|backward|weights)$/ && $7 > 1 {t += $9}
      k && $1 ~ /^attention_/ {t += $4} END {printf "%.3f", t}' "$1"; }
  f=$(ms "$work/att_fused.prof"); g=$(ms "$work/att_gemm.prof")
  if grep -q 'attention_fwd' "$work/att_fused.prof" && [ "$f" != "0.000" ] && [ "$g" != "0.000" ]; then
    row "attention fwd+bwd per layer, GPT-2 124M bf16 B $B S $S: fused kernels against the GEMM path" \
      "$(awk -v f="$f" -v l=$L 'BEGIN {printf "%.3f ms", f / l}')" \
      "GEMM path $(awk -v g="$g" -v l=$L 'BEGIN {printf "%.3f ms", g / l}') (batched GEMMs + softmax kernels); fused/GEMM $(awk -v f="$f" -v g="$g" 'BEGIN {printf "%.2f", f / g}')"
  else
    status=1; row "attention fused against GEMM (GPT-2 bf16)" "FAIL" "$(tail -n 2 "$work/att_fused.out" "$work/att_gemm.out" | tr '\n' ' ')"
  fi
else
  status=1; row "attention fused against GEMM" "FAIL" "ppc: $(tail -n 1 "$work/gpt2.log")"
fi

# the GEMMs of the fused bf16 step by time, from its profile: which shapes keep the average rate low
gemms=$(awk '/^  gemm:/ {g = 1; next} /^  kernels:/ {g = 0} g && NF >= 10 && n < 12 {print "    " $0; n++}' "$work/att_fused.prof" 2>/dev/null)

echo "gpu-check on $gpu ($(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD 2>/dev/null || echo ?))"
echo
echo "| check | result | detail |"
echo "|---|---|---|"
printf "%s" "$rows"
if [ -n "$gemms" ]; then
  echo
  echo "The GEMMs of GPT-2 124M's bf16 step (B $B, S $S) by time (PPR_PROFILE):"
  echo
  printf "%s\n" "$gemms"
fi
exit $status
