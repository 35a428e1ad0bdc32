/* rt_io.h - runtime file I/O: safetensors checkpoint reader/writer and token data sets. */
#ifndef RT_IO_H
#define RT_IO_H

#include <stddef.h>
#include <stdint.h>

/*
 * Conventions (all functions in this header):
 *  - Functions returning int status return 0 on success, non-zero on error.
 *  - On error a NUL-terminated message is written to err[0..errlen) (truncated
 *    if needed; err may be NULL or errlen 0 to discard it). Messages name the
 *    file and, where relevant, the tensor and what was expected vs found.
 *  - Nothing is printed; no global mutable state; every input is validated.
 */

/* ------------------------------------------------------------------ */
/* safetensors                                                         */
/* ------------------------------------------------------------------ */

#define RT_ST_MAX_NDIM   16                     /* tensors with more dims are rejected */
#define RT_ST_MAX_HEADER (100u * 1000u * 1000u) /* header JSON size limit (100 MB) */

typedef enum { RT_ST_F32 = 0, RT_ST_F16 = 1, RT_ST_BF16 = 2, RT_ST_F64 = 3 } RtStDtype;

typedef struct RtStFile RtStFile;

/* Open and validate a safetensors file (mmap'ed, read fallback). Accepted dtypes:
 * F32, F16, BF16, F64. "__metadata__" (string -> string) is validated and skipped;
 * unknown keys inside a tensor entry are ignored. Checks: header length vs file
 * size and limit, strict JSON (parsed by jansson: no key twice in any object,
 * only whitespace -- the padding -- after the object), end >= begin, byte span ==
 * product(shape) * dtype size (overflow checked), all data inside the file, no
 * two tensors' byte ranges overlap (an error naming both; an empty tensor holds
 * no bytes). The header may list the tensors in any order; holes between
 * tensors and trailing bytes after the last are tolerated.
 * On error *out is NULL. */
int rt_st_open(const char *path, RtStFile **out, char *err, size_t errlen);
void rt_st_close(RtStFile *f); /* NULL ok */

/* Accessors. Tensors are indexed 0..count-1 in header (file) order.
 * Bad f / index: count 0, name/dtype NULL, find/ndim/shape/numel/dtype_id -1. */
int rt_st_count(const RtStFile *f);
const char *rt_st_name(const RtStFile *f, int i);
int rt_st_find(const RtStFile *f, const char *name); /* -1 if absent */
int rt_st_ndim(const RtStFile *f, int i);            /* 0 for a scalar */
/* Copies min(ndim, maxdims) dims into dims (may be NULL if maxdims == 0); returns ndim. */
int rt_st_shape(const RtStFile *f, int i, int64_t *dims, int maxdims);
int64_t rt_st_numel(const RtStFile *f, int i);     /* 1 for a scalar */
int rt_st_dtype_id(const RtStFile *f, int i);      /* RtStDtype */
const char *rt_st_dtype(const RtStFile *f, int i); /* "F32" / "F16" / "BF16" / "F64" */

/* The checksums (RT_ST_SUM_KEY in the header's __metadata__, which ppr writes for every tensor;
 * rt_st_open has checked that a file has them for all its tensors or none): 1 when f has them. */
int rt_st_has_checksums(const RtStFile *f);
/* Tensor i's bytes hashed and compared with its recorded checksum: 0 when they agree or it has none;
 * -1 with a message naming the file and the tensor when they differ. */
int rt_st_verify(const RtStFile *f, int i, char *err, size_t errlen);

/* Read a whole tensor as float32 (F16/BF16 converted exactly, incl. subnormals,
 * +-0, inf, nan; F64 rounded to nearest, a finite value beyond the float range an
 * error naming the tensor and the element). n must equal the tensor's element count. */
int rt_st_read_f32(const RtStFile *f, int i, float *dst, size_t n, char *err, size_t errlen);

/* Read the hyper-rectangle start[d] <= idx[d] < start[d] + len[d] (for every dim
 * d < ndim) into dense row-major dst of n == product(len) elements. For a scalar
 * start/len may be NULL. Used to cut tensor-parallel shards from a dense file. */
int rt_st_read_f32_slice(const RtStFile *f, int i, const int64_t *start, const int64_t *len, float *dst, size_t n,
                         char *err, size_t errlen);

/* Write n F32 tensors in the given order: names[k], ndims[k] (0..RT_ST_MAX_NDIM),
 * shapes[k] (may be NULL when ndims[k] == 0), data[k] (may be NULL when the
 * tensor has 0 elements). Header is space-padded to a multiple of 8. Written to
 * "<path>.tmp", fsync'ed, then renamed over path; on error nothing is left
 * behind and an existing file at path is untouched. Names must be unique,
 * valid UTF-8 without NUL and not "__metadata__"; they are JSON-escaped. Each
 * tensor's checksum goes into the header's __metadata__ (rt_st_verify). */
int rt_st_write(const char *path, int n, const char *const *names, const int *ndims, const int64_t *const *shapes,
                const float *const *data, char *err, size_t errlen);

/* ------------------------------------------------------------------ */
/* checkpoints: a file, a sharded checkpoint's index, a model folder   */
/* ------------------------------------------------------------------ */

typedef struct RtCkpt RtCkpt;

/* Opens a checkpoint as one set of tensors: a safetensors file; a sharded checkpoint's index (a
 * path ending in ".json", Hugging Face's model.safetensors.index.json: {"weight_map": {tensor:
 * shard}}, the shards beside it, plain file names); or a model folder holding model.safetensors
 * (taken first) or model.safetensors.index.json. Every file is checked as rt_st_open checks it;
 * an index's map and its shards must agree exactly (a tensor the map puts in a shard that does not
 * hold it, a shard's tensor the map does not name or puts elsewhere, a tensor in two shards: errors
 * naming the tensor and the files). On error *out is NULL. */
int rt_ckpt_open(const char *path, RtCkpt **out, char *err, size_t errlen);
void rt_ckpt_close(RtCkpt *c); /* NULL ok */
/* JSON as transformers writes it (config.json, the index; ppr's trainer_state.json): 2-space
 * indent, sorted keys, each number with the fewest digits that read back (common/pp_json.h), a
 * final newline; malloc'ed, NULL when out of memory. */
struct json_t;
char *rt_ckpt_json_text(const struct json_t *v);
int rt_ckpt_count(const RtCkpt *c);
int rt_ckpt_nfiles(const RtCkpt *c);
const char *rt_ckpt_name(const RtCkpt *c, int i);    /* tensors 0..count-1: file by file, header order */
int rt_ckpt_find(const RtCkpt *c, const char *name); /* -1 if absent */
/* Every tensor of every file hashed and checked against its recorded checksum (rt_st_verify);
 * *nsummed: the tensors that have one (0: a checkpoint another program wrote). 0, or -1 with a
 * message naming the file and the first tensor that differs. */
int rt_ckpt_verify(const RtCkpt *c, int *nsummed, char *err, size_t errlen);
/* The file holding tensor i, and its index there (read it with rt_st_*); NULL for a bad i. */
const RtStFile *rt_ckpt_file(const RtCkpt *c, int i, int *idx);

#define RT_CKPT_SHARD_DEFAULT (5000ull * 1000 * 1000) /* transformers' max_shard_size, "5GB" */

#define RT_CKPT_OPTIMIZER_NAME "optimizer.safetensors" /* a folder's training state: the AdamW moments */
#define RT_CKPT_STATE_NAME     "trainer_state.json"    /* and the step, settings and identity */
#define RT_CKPT_TRAINER_DIR    "trainer"               /* the folder inside a checkpoint folder that holds them */

/* The files a hub folder holds beside the weights and config.json, which --save copies from the
 * folder the weights came from (NULL-terminated) */
extern const char *const rt_ckpt_hub_files[];

typedef struct {
  uint64_t shard_bytes;  /* the most bytes of tensors in one shard (0: RT_CKPT_SHARD_DEFAULT) */
  const char *hf_config; /* JSON object written as config.json (torch_dtype set to float32); NULL: none */
  /* config.json's _name_or_path: name_or_path; NULL: the config's own, else (none, or "") model */
  const char *name_or_path, *model;
  /* files written into the folder: copy_len[i] bytes copy_data[i] as copy_name[i] (one of rt_ckpt_hub_files) */
  int ncopy;
  const char *const *copy_name, *const *copy_data;
  const size_t *copy_len;
  /* the training state, written into trainer/ when state_json is not NULL: nopt F32 tensors
   * (as rt_st_write takes them) as optimizer.safetensors and state_json as trainer_state.json */
  int nopt;
  const char *const *opt_names;
  const int *opt_ndims;
  const int64_t *const *opt_shapes;
  const float *const *opt_data;
  const char *state_json;
} RtCkptOpts;

/* 1 when --save's path names one safetensors file (it ends in ".safetensors"), else 0: a folder. */
int rt_ckpt_is_file_path(const char *path);
/* 0 when path may be written as a checkpoint folder: absent, or a folder holding only a
 * checkpoint's files (model.safetensors, model-NNNNN-of-NNNNN.safetensors, the index,
 * config.json, rt_ckpt_hub_files, optimizer.safetensors and trainer_state.json in trainer/ or
 * beside the weights), which is replaced whole. Nothing is changed. */
int rt_ckpt_check_dir(const char *path, char *err, size_t errlen);
/* Removes checkpoint folder path, when rt_ckpt_check_dir allows it. 0, or -1 with the reason. */
int rt_ckpt_remove_dir(const char *path, char *err, size_t errlen);
/* Writes the F32 tensors (as rt_st_write takes them) as a folder transformers' from_pretrained
 * loads: model.safetensors, or, when they pass o->shard_bytes, shards model-00001-of-0000N.safetensors
 * (tensors in order, a new shard when the next would pass the limit; a larger tensor alone) and
 * model.safetensors.index.json (metadata.total_size, weight_map); config.json when o->hf_config;
 * o's copies (a hub folder's tokenizer and generation config); trainer/optimizer.safetensors and
 * trainer/trainer_state.json when o->state_json: the folder is what a hub upload holds, and
 * transformers ignores trainer/.
 * Written into PATH.tmp-XXXXXX beside it and renamed over PATH (an earlier checkpoint folder there
 * is replaced; rt_ckpt_check_dir's rule); on error nothing is left behind. */
int rt_ckpt_write_dir(const char *path, int n, const char *const *names, const int *ndims, const int64_t *const *shapes,
                      const float *const *data, const RtCkptOpts *o, char *err, size_t errlen);

/* ------------------------------------------------------------------ */
/* token data                                                          */
/* ------------------------------------------------------------------ */

#define RT_DATA_LLMC_MAGIC 20240520

typedef struct RtData RtData;

/* If the file starts with int32 20240520 it is an llm.c token file: 256 int32
 * header (little-endian), header[1] the version, header[2] == token count > 0,
 * then exactly that many tokens (size checked exactly): version 1 uint16 tokens
 * (llm.c's), version 2 uint32 tokens (below 2^31; for vocabularies over 65536).
 * Otherwise the file is text whose bytes are the tokens (0..255) -- unless it
 * claims to be an llm.c file, which is an error naming the expected magic: its
 * name ends in ".bin" (any case), or its first int32 reads, little- or
 * big-endian, like an llm.c magic (a YYYYMMDD date in 2000..2099: the model
 * checkpoint's 20240326, the tokenizer's 20240328, ...). An empty file is an error.
 * header[3] is the loss-mask flag (ppr's extension; llm.c writes 0): 1 when count bytes follow
 * the tokens, byte p 1 if token p counts as a label of the loss, 0 if not (any other byte, or
 * flag, is an error naming the position). */
int rt_data_open(const char *path, RtData **out, char *err, size_t errlen);
/* Text tokens from memory (bytes are copied; no llm.c detection); n == 0 is an error. */
int rt_data_from_memory(const unsigned char *bytes, size_t n, RtData **out, char *err, size_t errlen);
int64_t rt_data_len(const RtData *d);   /* number of tokens; 0 for NULL */
int rt_data_max_token(const RtData *d); /* largest token id; -1 for NULL */
int rt_data_is_text(const RtData *d);   /* 1: text, its bytes the tokens (not an llm.c token file) */
/* 0 when every token is below vocab; else -1 and "NAME: token T at position P is not below the
 * vocabulary's V" (the first such token). */
int rt_data_check_vocab(const RtData *d, const char *name, int64_t vocab, char *err, size_t errlen);
/* Writes n tokens (each below vocab) as an llm.c token file: version 1 (uint16) when vocab <=
 * 65536, else version 2 (uint32); vocab <= 2^31. Through "<path>.tmp" and a rename. */
int rt_data_write(const char *path, const uint32_t *tokens, int64_t n, int64_t vocab, char *err, size_t errlen);
void rt_data_close(RtData *d); /* NULL ok */
/* Tokens [start, start + n) of d as data of their own (copied), 0 <= start, 1 <= n, start + n <= len:
 * --val-frac's training head and validation tail. name is for the message. */
int rt_data_slice(const RtData *d, int64_t start, int64_t n, const char *name, RtData **out, char *err, size_t errlen);

/* Batch for step s, micro-batch m of M, B rows of S tokens: row b reads S+1
 * consecutive tokens starting at ((s*M + m)*B + b)*S (int64), every index taken
 * mod len (non-negative, no overflow). tokens[b*S+i] = the first S,
 * labels[b*S+i] = the last S (both row-major [B,S]). Does nothing if d is NULL
 * or B <= 0 or S <= 0; tokens or labels may be NULL to skip filling them. */
void rt_data_batch(const RtData *d, int64_t step, int m, int M, int B, int S, int32_t *tokens, int32_t *labels);
/* Whether d carries a loss mask. A label whose token's mask byte is 0 is written as the ignore
 * label (rt_data_set_ignore; -100 until set). */
int rt_data_has_mask(const RtData *d);
void rt_data_set_ignore(RtData *d, int32_t ignore);
/* The labels of micro-batches m0 .. m0+n-1 of M at step s (B rows of S) that are not the ignore
 * label: what a masked loss divides by. */
int64_t rt_data_count(const RtData *d, int64_t step, int m0, int n, int M, int B, int S);

#endif /* RT_IO_H */
