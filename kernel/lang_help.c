/* The vocabulary of the cell language: the command table (commands.def:
 * statements, keywords, functions and magics, with their help), the options
 * and where each is valid, and the help text shown by inspection and %help.
 *
 * These tables are the single place a word is declared: the parser (lang.c)
 * and completion (lang_complete.c) ask them, and the interpreter expands the
 * same command table for its dispatch. Every word has help; the unit test
 * checks that. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lang.h"

/* ---- grammar tables ---------------------------------------------------- */

enum {
  CTX_TRAIN = 1 << 0,
  CTX_EVAL = 1 << 1,
  CTX_SAMPLE = 1 << 2,
  CTX_RUN = 1 << 3,
  CTX_INSTANCES = 1 << 4,
  CTX_GPT = 1 << 5,
  CTX_MLP = 1 << 6,
  CTX_RESOURCE = CTX_TRAIN | CTX_EVAL | CTX_SAMPLE | CTX_RUN,
};

static const struct {
  const char *name;
  unsigned mask;
} contexts[] = {
    {"train", CTX_TRAIN}, {"eval", CTX_EVAL},           {"sample", CTX_SAMPLE},
    {"%%run", CTX_RUN},   {"%instances", CTX_INSTANCES}, {"gpt", CTX_GPT},
    {"mlp", CTX_MLP},
};

/* In the order completion and error messages list them. */
static const struct {
  const char *name;
  unsigned mask;
} options[] = {
    {"steps", CTX_TRAIN | CTX_EVAL},
    {"batch", CTX_TRAIN | CTX_EVAL},
    {"lr", CTX_TRAIN},
    {"seed", CTX_TRAIN | CTX_SAMPLE},
    {"warmup", CTX_TRAIN},
    {"weight_decay", CTX_TRAIN},
    {"grad_clip", CTX_TRAIN},
    {"eval_every", CTX_TRAIN},
    {"detach", CTX_TRAIN},
    {"tokens", CTX_SAMPLE},
    {"temperature", CTX_SAMPLE},
    {"top_k", CTX_SAMPLE},
    {"layers", CTX_GPT | CTX_MLP},
    {"heads", CTX_GPT},
    {"dim", CTX_GPT},
    {"ctx", CTX_GPT},
    {"hidden", CTX_MLP},
    {"dropout", CTX_GPT | CTX_MLP},
    {"vocab", CTX_GPT},
    {"gpus", CTX_RESOURCE | CTX_INSTANCES},
    {"precision", CTX_TRAIN | CTX_EVAL | CTX_SAMPLE},
    {"nodes", CTX_RESOURCE},
    {"spot", CTX_RESOURCE},
    {"max_price", CTX_RESOURCE},
    {"instance", CTX_RESOURCE},
    {"region", CTX_RESOURCE},
    {"deadline", CTX_RESOURCE},
    {"checkpoint_every", CTX_RESOURCE},
};

static const struct jk_command commands[] = {
#define JK_COMMAND(id, word, kind, stmt, args, gateway, run, complete, funcs, summary, text,     \
                   example)                                                                    \
  [JK_CMD_##id] = {word, kind, stmt, args, gateway, complete, funcs, summary, text, example},
#include "commands.def"
#undef JK_COMMAND
};

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

const struct jk_command *jk_lang_command(enum jk_cmd id) {
  return (size_t)id < N_OF(commands) ? &commands[id] : NULL;
}

int jk_lang_find_command(const char *word, enum jk_cmd *ret_id) {
  for (size_t i = 0; i < N_OF(commands); i++)
    if (commands[i].kind != JK_WORD_FORM && strcmp(commands[i].word, word) == 0) {
      if (ret_id)
        *ret_id = (enum jk_cmd)i;
      return 0;
    }
  return -ENOENT;
}

static bool is_magic(const struct jk_command *c) {
  return c->kind == JK_WORD_MAGIC || c->kind == JK_WORD_CELL_MAGIC;
}

/* The i-th row of the command table that passes want (magics or the rest), or NULL. */
static const struct jk_command *nth_word(size_t i, bool magics, size_t *ret_skipped) {
  size_t n = 0;
  for (size_t k = 0; k < N_OF(commands); k++) {
    if (commands[k].kind == JK_WORD_FORM || is_magic(&commands[k]) != magics)
      continue;
    if (n++ == i)
      return &commands[k];
  }
  *ret_skipped = n;
  return NULL;
}

/* Words in completion order: statements, keywords and functions, options, magics. */
const char *jk_lang_word(size_t i, enum jk_word_kind *ret_kind) {
  size_t n;
  const struct jk_command *c = nth_word(i, false, &n);
  if (!c) {
    i -= n;
    if (i < N_OF(options)) {
      if (ret_kind)
        *ret_kind = JK_WORD_OPTION;
      return options[i].name;
    }
    c = nth_word(i - N_OF(options), true, &n);
  }
  if (!c)
    return NULL;
  if (ret_kind)
    *ret_kind = c->kind;
  return c->word;
}

bool jk_lang_is_reserved(const char *name) {
  enum jk_cmd id;
  if (jk_lang_find_command(name, &id) < 0)
    return false;
  return commands[id].kind == JK_WORD_STATEMENT || commands[id].kind == JK_WORD_KEYWORD;
}

static unsigned context_mask(const char *context) {
  for (size_t i = 0; context && i < N_OF(contexts); i++)
    if (strcmp(contexts[i].name, context) == 0)
      return contexts[i].mask;
  return 0;
}

const char *jk_lang_option(const char *context, size_t i) {
  unsigned mask = context_mask(context);
  for (size_t k = 0; mask && k < N_OF(options); k++)
    if ((options[k].mask & mask) && i-- == 0)
      return options[k].name;
  return NULL;
}

bool jk_lang_has_option(const char *context, const char *name) {
  unsigned mask = context_mask(context);
  for (size_t k = 0; mask && k < N_OF(options); k++)
    if ((options[k].mask & mask) && strcmp(options[k].name, name) == 0)
      return true;
  return false;
}

int jk_lang_magic(const char *name, bool cell, enum jk_magic_args *ret_args) {
  char word[48];
  enum jk_cmd id;
  if (snprintf(word, sizeof word, "%s%s", cell ? "%%" : "%", name) >= (int)sizeof word ||
      jk_lang_find_command(word, &id) < 0)
    return -ENOENT;
  if (ret_args)
    *ret_args = commands[id].args;
  return 0;
}

/* ---- help -------------------------------------------------------------- */

struct help {
  const char *word;
  const char *summary; /* one line, for %help */
  const char *text;    /* a paragraph */
  const char *example;
};

/* The help of the options; the other words' help is in commands.def. */
static const struct help helps[] = {
    /* options */
    {"steps", "steps=N: number of optimisation (or evaluation) steps",
     "For train, the number of optimiser steps; for eval, the number of batches measured.",
     "train m on d steps=3000"},
    {"batch", "batch=N: sequences (or examples) per step", "The batch size of each step.",
     "train m on d batch=32"},
    {"lr", "lr=RATE: learning rate", "The peak learning rate of the AdamW optimiser.",
     "train m on d lr=3e-4"},
    {"seed", "seed=N: random seed", "Seeds initialisation, data order and sampling.",
     "sample m seed=1"},
    {"warmup", "warmup=STEPS: learning-rate warmup",
     "Steps over which the learning rate rises linearly to lr.", "train m on d warmup=100"},
    {"weight_decay", "weight_decay=X: AdamW weight decay", "Decoupled weight decay factor.",
     "train m on d weight_decay=0.1"},
    {"grad_clip", "grad_clip=X: gradient norm clipping", "Clips the global gradient norm to X.",
     "train m on d grad_clip=1.0"},
    {"eval_every", "eval_every=STEPS: validation interval",
     "Measures the validation loss every STEPS steps.", "train m on d eval_every=250"},
    {"detach", "detach=yes|no: return at once",
     "With detach=yes the cell returns as soon as the job is submitted; %attach JOB follows "
     "it later.",
     "train m on d detach=yes"},
    {"tokens", "tokens=N: how many tokens to generate", "The length of the sample.",
     "sample m tokens=200"},
    {"temperature", "temperature=X: sampling temperature",
     "Divides the logits before sampling; lower is more conservative.",
     "sample m temperature=0.8"},
    {"top_k", "top_k=N: sample among the N most likely tokens",
     "Restricts each step to the N most likely tokens.", "sample m top_k=40"},
    {"layers", "layers=N: number of layers (gpt, mlp)",
     "Transformer blocks for gpt, hidden layers for mlp.", "gpt(layers=4)"},
    {"heads", "heads=N: attention heads (gpt)", "Must divide dim.", "gpt(heads=4)"},
    {"dim", "dim=N: embedding width (gpt)", "The width of the residual stream.",
     "gpt(dim=128)"},
    {"ctx", "ctx=N: context length (gpt)", "The longest sequence the model attends over.",
     "gpt(ctx=128)"},
    {"hidden", "hidden=N: hidden layer width (mlp)", "Units in each hidden layer.",
     "mlp(hidden=256)"},
    {"dropout", "dropout=X: dropout rate (gpt, mlp)", "Probability of zeroing an activation.",
     "gpt(dropout=0.1)"},
    {"vocab", "vocab=N: vocabulary size (gpt)",
     "Defaults to the data set's vocabulary.", "gpt(vocab=256)"},
    {"gpus", "gpus=N: GPUs per node",
     "How many GPUs each worker needs and the job trains on (data-parallel past one); gpus=0 "
     "trains on the CPU. Without it a job uses one GPU when its instance has one, else the CPU. "
     "A job never falls back to the CPU when the GPUs it asked for are missing: it fails, "
     "saying so. For %instances, the GPU count to price.",
     "train m on d gpus=1"},
    {"precision", "precision=bf16|fp32: arithmetic of the matrix products",
     "bf16 multiplies in bfloat16 with fp32 accumulation and fp32 master weights (GPUs only); "
     "fp32 is exact float32. Default: bf16 on GPUs, fp32 on the CPU.",
     "train m on d gpus=1 precision=bf16"},
    {"nodes", "nodes=N: instances used together (train)",
     "A train job on N instances at once, one data-parallel rank on each; batch is split "
     "among them (a multiple of N). Placed all or none; a preemption of one moves them all.",
     "train m on d nodes=2"},
    {"spot", "spot=yes|no|auto: use spot instances",
     "yes: only spot; no: only on-demand; auto: spot when it is cheaper per unit of work "
     "after expected interruptions.",
     "train m on d spot=auto"},
    {"max_price", "max_price=USD: highest price per instance-hour",
     "Instances costing more per hour are not used.", "train m on d max_price=0.60"},
    {"instance", "instance=TYPE[,TYPE...]: allowed instance types",
     "Restricts the choice to these types, in order of preference.",
     "train m on d instance=g5.xlarge,g4dn.xlarge"},
    {"region", "region=NAME: cloud region", "Where workers are started.",
     "train m on d region=us-east-1"},
    {"deadline", "deadline=DURATION: give up after this long",
     "The job is cancelled if it has not finished within DURATION of submission.",
     "train m on d deadline=3h"},
    {"checkpoint_every", "checkpoint_every=STEPS|auto: checkpoint interval",
     "How often the job saves a checkpoint; auto picks an interval from the instance's "
     "interruption rate.",
     "train m on d checkpoint_every=auto"},
};

/* The help of a word: a command's from its row, an option's from helps[].
 * Written into *tmp when it comes from the command table. */
static const struct help *find_help(const char *word, struct help *tmp) {
  enum jk_cmd id;
  if (jk_lang_find_command(word, &id) == 0) {
    *tmp = (struct help){commands[id].word, commands[id].summary, commands[id].text,
                         commands[id].example};
    return tmp;
  }
  for (size_t i = 0; i < N_OF(helps); i++)
    if (strcmp(helps[i].word, word) == 0)
      return &helps[i];
  return NULL;
}

/* Returns an owned string, or NULL when out of memory. */
static char *format_help(const struct help *h, int detail_level) {
  char *out = NULL;
  size_t size = 0;
  FILE *f = open_memstream(&out, &size);
  if (!f)
    return NULL;
  fprintf(f, "%s\n\n%s\n", h->summary, h->text);
  if (detail_level >= 1)
    fprintf(f, "\nExample:\n    %s\n", h->example);
  if (fclose(f) != 0) {
    free(out);
    return NULL;
  }
  return out;
}

/* Byte offset of code point cp, clamped to len. */
static size_t byte_offset(const char *s, size_t len, size_t cp) {
  size_t off = 0;
  for (; off < len && cp > 0; cp--) {
    off++;
    while (off < len && ((unsigned char)s[off] & 0xC0) == 0x80)
      off++;
  }
  return off;
}

/* The word at (or just before) cursor_pos, in code points: letters, digits,
 * '_' and '%' (magics keep their prefix). Written into word (NUL-terminated),
 * empty when there is none or it is too long. */
static void word_at(const char *code, size_t len, size_t cursor_pos, char *word,
                    size_t word_size) {
  size_t off = byte_offset(code, len, cursor_pos);
#define WORDCH(c) ((c) == '%' || (c) == '_' || ((c) >= '0' && (c) <= '9') || \
                   (((c) | 32) >= 'a' && ((c) | 32) <= 'z'))
  size_t start = off, end = off;
  while (start > 0 && WORDCH(code[start - 1]))
    start--;
  while (end < len && WORDCH(code[end]))
    end++;
#undef WORDCH
  size_t n = end - start;
  if (n >= word_size)
    n = 0;
  memcpy(word, code + start, n);
  word[n] = '\0';
}

/* The help of word, also when it is written with one % too few or too many
 * ("%run" for the cell magic, "%%status" for a line magic). */
static char *help_of(const char *word, int detail_level) {
  struct help tmp;
  const struct help *h = find_help(word, &tmp);
  if (!h && word[0] == '%' && word[1] != '%') {
    char other[70];
    snprintf(other, sizeof other, "%%%s", word);
    h = find_help(other, &tmp);
  }
  if (!h && word[0] == '%' && word[1] == '%')
    h = find_help(word + 1, &tmp);
  return h ? format_help(h, detail_level) : NULL;
}

char *jk_inspect(const char *code, size_t len, size_t cursor_pos, int detail_level) {
  char word[64];
  if (!code)
    return NULL;
  word_at(code, len, cursor_pos, word, sizeof word);
  /* just after "gpt(" or "steps=": the word before the bracket or sign */
  size_t off = byte_offset(code, len, cursor_pos);
  if (!word[0] && off > 0 && (code[off - 1] == '(' || code[off - 1] == '='))
    word_at(code, len, cursor_pos - 1, word, sizeof word);
  return help_of(word, detail_level);
}

char *jk_help_topic(const char *word) {
  return word && *word && strlen(word) < 64 ? help_of(word, 1) : NULL;
}

static void help_section(FILE *f, const char *title, enum jk_word_kind k1,
                         enum jk_word_kind k2) {
  enum jk_word_kind kind;
  const char *w;
  fprintf(f, "%s:\n", title);
  for (size_t i = 0; (w = jk_lang_word(i, &kind)); i++) {
    if (kind != k1 && kind != k2)
      continue;
    struct help tmp;
    const struct help *h = find_help(w, &tmp);
    fprintf(f, "  %s\n", h ? h->summary : w);
  }
  fputc('\n', f);
}

char *jk_help_all(void) {
  char *out = NULL;
  size_t size = 0;
  FILE *f = open_memstream(&out, &size);
  if (!f)
    return NULL;
  help_section(f, "Statements", JK_WORD_STATEMENT, JK_WORD_STATEMENT);
  help_section(f, "Functions", JK_WORD_FUNCTION, JK_WORD_FUNCTION);
  help_section(f, "Options (name=value after train, eval, sample, %%run)", JK_WORD_OPTION,
               JK_WORD_OPTION);
  help_section(f, "Magics", JK_WORD_MAGIC, JK_WORD_CELL_MAGIC);
  fprintf(f, "Values: numbers (3e-4, 2000, 0.60), \"strings\", yes/no, durations (90s, 30m, "
             "2h), lists (a,b).\nA line ending in \\ continues on the next; # starts a "
             "comment. Put the cursor on a word and press Shift-Tab for its help.\n");
  if (fclose(f) != 0) {
    free(out);
    return NULL;
  }
  return out;
}
