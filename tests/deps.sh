#!/bin/sh
# deps.sh — installs the Debian packages the build needs (as root), or says what to install.
# Each line: a command or header that must exist, and the package that provides it.
set -u
need=""
have_cmd() { command -v "$1" >/dev/null 2>&1; }
have_hdr() { [ -e "/usr/include/$1" ] || [ -e "/usr/include/x86_64-linux-gnu/$1" ]; }
have_cmd flex  || need="$need flex"
have_cmd bison || need="$need bison"
have_cmd cc    || need="$need gcc"
# OpenBLAS for ppr: the cblas.h of one of its variants and the library
have_blas() {
  [ -e /usr/lib/x86_64-linux-gnu/libopenblas.so ] || return 1
  for v in pthread openmp serial; do have_hdr "openblas-$v/cblas.h" && return 0; done
  return 1
}
have_blas      || need="$need libopenblas-dev"
# MPI for ppr: Open MPI's compiler wrapper (with mpi.h) and its launcher
have_cmd mpicc  || need="$need libopenmpi-dev"
have_cmd mpirun || need="$need openmpi-bin"
# OpenCL for ppr's opencl device: the headers, the ICD loader, CLBlast, and a driver for this
# machine's CPU (PoCL), so that the OpenCL tests run everywhere
have_hdr CL/cl.h       || need="$need opencl-headers"
[ -e /usr/lib/x86_64-linux-gnu/libOpenCL.so ] || need="$need ocl-icd-opencl-dev"
have_hdr clblast_c.h   || need="$need libclblast-dev"
# oneDNN for the cpu device's bf16 GEMMs (AVX512-BF16 and AMX where the CPU has them)
have_hdr dnnl.h        || need="$need libdnnl-dev"
ls /etc/OpenCL/vendors/pocl*.icd >/dev/null 2>&1 || need="$need pocl-opencl-icd"
# jansson for ppr's safetensors reader: it parses the header JSON
have_hdr jansson.h     || need="$need libjansson-dev"
# xxHash for the checksums of checkpoints and the compile id of a stage directory
have_hdr xxhash.h      || need="$need libxxhash-dev"
# PCRE2 and utf8proc for tokenizer.json's pre-tokenizer regexes and NFC (ppr --tokenizer)
have_hdr pcre2.h       || need="$need libpcre2-dev"
have_hdr utf8proc.h    || need="$need libutf8proc-dev"
# clang-format: make test keeps the one style of .clang-format (tests/scripts/lint_format.sh)
have_cmd clang-format  || need="$need clang-format"
# help2man: make install writes the man pages from --help
have_cmd help2man      || need="$need help2man"
[ -z "$need" ] && exit 0
if [ "$(id -u)" = 0 ] && have_cmd apt-get; then
  echo "deps: installing$need"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null && apt-get install -y -qq $need >/dev/null || {
    echo "deps: apt-get install$need failed" >&2; exit 1; }
else
  echo "deps: missing$need; install them with: sudo apt-get install$need" >&2
  exit 1
fi
