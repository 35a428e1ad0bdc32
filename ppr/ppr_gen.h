/* ppr_gen.h - text from a model (ppr_gen.c): the autoregressive loop over a program's logits
 * (rt_exec_next_logits), greedy, temperature and top-k sampling, and the tokens as text (bytes, or
 * an llm.c tokenizer file). */
#ifndef PPR_GEN_H
#define PPR_GEN_H

#include <stdint.h>
#include <stdio.h>

#include "rt_comm.h"
#include "rt_exec.h"

/* How the next token is picked from the logits: temperature 0 is greedy (the argmax, the lowest
 * id among equals); else a draw from softmax(logits / temperature) over the top_k largest (0: the
 * whole vocabulary), from a splitmix64 stream seeded by seed: the same tokens for the same seed
 * on every mesh whose logits are the same. */
typedef struct {
  double temperature;
  int64_t top_k;
  uint64_t state; /* the stream: set to the seed before the first draw */
} PprSampler;

/* The index of the token picked from row[0..vocab). */
int64_t ppr_gen_pick(PprSampler *s, const float *row, int64_t vocab);

/* Extends tok[0..n) by `count` tokens (tok has room for n + count): each the pick from the logits
 * after the last min(n, seq) tokens (the program's sequence: older ones fall out of the window),
 * through x (its `logits`, gathered on world rank 0, which picks and broadcasts). Every rank calls
 * it alike. 0; RT_FAILED with the message in err; RT_DEVICE_FAILED when this rank's device failed. */
int ppr_gen_extend(RtComm *comm, RtExec *x, const RtProg *p, PprSampler *s, int32_t *tok, int n, int count, char *err,
                   size_t errlen);

/* The text of tokens: a Hugging Face tokenizer.json (a JSON object: its BPE model, ppr_bpe.h, which
 * also encodes), or a token-id-to-bytes table, an llm.c tokenizer file (magic 20240328, version 1
 * or 2, the count of tokens, then each as a length byte and its bytes). */
typedef struct PprTokenizer PprTokenizer;
int ppr_gen_tokenizer_open(const char *path, int64_t vocab, PprTokenizer **out, char *err, size_t errlen);
void ppr_gen_tokenizer_close(PprTokenizer *t); /* NULL ok */
/* 1 when t is a tokenizer.json (it encodes). */
int ppr_gen_tokenizer_encodes(const PprTokenizer *t);
/* text's ids through a tokenizer.json (*ids malloc'ed), each below vocab. 0, or -1 with a message
 * (an llm.c tokenizer file does not encode). */
int ppr_gen_tokenizer_encode(const PprTokenizer *t, const char *text, int64_t vocab, int32_t **ids, int64_t *n,
                             char *err, size_t errlen);

/* Writes tok[0..n) to f: through the tokenizer when there is one; else, for a vocabulary of at
 * most 256 (a byte-level model: each token one byte), as the bytes, control characters other
 * than newline and tab written \xHH; else as token ids separated by spaces. */
void ppr_gen_print(FILE *f, const int32_t *tok, int n, int64_t vocab, const PprTokenizer *t);

#endif /* PPR_GEN_H */
