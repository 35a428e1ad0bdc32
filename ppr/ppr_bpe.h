/* ppr_bpe.h - a Hugging Face tokenizer.json's BPE model, to encode prompts and decode tokens
 * (ppr_bpe.c): byte-level BPE as GPT-2, Llama-3 and Qwen use (ByteLevel, Split by a regex), and
 * SentencePiece-style BPE with byte fallback (Prepend/Replace or Metaspace); NFC normalization;
 * the added tokens matched in the text. What else a tokenizer.json may say is refused by name. */
#ifndef PPR_BPE_H
#define PPR_BPE_H

#include <stddef.h>
#include <stdint.h>

typedef struct PprBpe PprBpe;

/* Reads path (a tokenizer.json). 0, or -1 with a message naming the file and the field. */
int ppr_bpe_open(const char *path, PprBpe **t, char *err, size_t errlen);
/* The ids of text (n bytes of UTF-8), as tokenizers' encode(text, add_special_tokens=False):
 * *ids malloc'ed. 0, or -1 with a message. */
int ppr_bpe_encode(const PprBpe *t, const char *text, size_t n, int32_t **ids, int64_t *nids, char *err, size_t errlen);
/* The bytes of the text of ids (*text malloc'ed, NUL-terminated; ids outside the vocabulary as
 * "<ID>"). 0, or -1 when out of memory. */
int ppr_bpe_decode(const PprBpe *t, const int32_t *ids, int64_t n, char **text, size_t *len);
/* The largest id plus one. */
int64_t ppr_bpe_size(const PprBpe *t);
void ppr_bpe_free(PprBpe *t);

#endif /* PPR_BPE_H */
