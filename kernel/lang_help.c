/* The vocabulary of the cell language: the command table (commands.def:
 * statements, keywords, functions and magics, with their help), the options
 * and where each is valid, and the help text shown by inspection and %help.
 *
 * These tables are the single place a word is declared: the parser (lang.c)
 * and completion (lang_complete.c) ask them, and the interpreter expands the
 * same command table for its dispatch. Options are declared as sl_opt rows:
 * spotlab-train's in its own table (kernels/train_opts.c), taken from there
 * with their contexts, the kernel's own here in the same form. Every word
 * has help: from the command table, or for an option, written from its
 * declaration; the unit test checks that. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lang.h"
#include "train_opts.h"

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

/* Options: spotlab-train's (train_opts.c), where its table gives them a
 * statement or model context, then the kernel's own below, which configure
 * where a job runs rather than what it computes. Both are sl_opt rows, so
 * validation, completion and help treat them alike. In this order
 * completion and error messages list them. */
#define KOPT(name, type, min, max, choices, metavar, example, contexts, help, doc) \
  {name, type, 0, 0, NULL, min, max, choices, metavar, example, help, doc, contexts, 0, NULL}
static const struct sl_opt kernel_options[] = {
    KOPT("detach", SL_OPT_BOOL, 0, 0, NULL, NULL, "yes", CTX_TRAIN, "return at once",
         "With detach=yes the cell returns as soon as the job is submitted; %attach JOB follows "
         "it later."),
    KOPT("gpus", SL_OPT_INT, 0, 64, NULL, NULL, "1", CTX_RESOURCE | CTX_INSTANCES, "GPUs per node",
         "How many GPUs each worker needs and the job trains on (data-parallel past one); gpus=0 "
         "trains on the CPU. Without it a job uses one GPU when its instance has one, else the "
         "CPU. A job never falls back to the CPU when the GPUs it asked for are missing: it "
         "fails, saying so. For %instances, the GPU count to price."),
    KOPT("precision", SL_OPT_STR, 0, 0, "bf16|fp32", NULL, "bf16",
         CTX_TRAIN | CTX_EVAL | CTX_SAMPLE, "arithmetic of the matrix products",
         "bf16 multiplies in bfloat16 with fp32 accumulation and fp32 master weights (GPUs "
         "only); fp32 is exact float32. Default: bf16 on GPUs, fp32 on the CPU."),
    KOPT("nodes", SL_OPT_INT, 1, 64, NULL, NULL, "2", CTX_RESOURCE, "instances used together (train)",
         "A train job on N instances at once, one data-parallel rank on each; batch is split "
         "among them (a multiple of N). Placed all or none; a preemption of one moves them all."),
    KOPT("spot", SL_OPT_STR, 0, 0, "yes|no|auto", NULL, "auto", CTX_RESOURCE, "use spot instances",
         "yes: only spot; no: only on-demand; auto: spot when it is cheaper per unit of work "
         "after expected interruptions."),
    KOPT("max_price", SL_OPT_NUM, 0, 0, NULL, "USD", "0.60", CTX_RESOURCE,
         "highest price per instance-hour", "Instances costing more per hour are not used."),
    KOPT("instance", SL_OPT_STR, 0, 0, NULL, "TYPE[,TYPE...]", "g5.xlarge,g4dn.xlarge", CTX_RESOURCE,
         "allowed instance types", "Restricts the choice to these types, in order of preference."),
    KOPT("region", SL_OPT_STR, 0, 0, NULL, "NAME", "us-east-1", CTX_RESOURCE, "cloud region",
         "Where workers are started."),
    KOPT("deadline", SL_OPT_DUR, 1, 30 * 86400, NULL, NULL, "3h", CTX_RESOURCE, "finish by then, at least cost",
         "Spot while the slack allows, on-demand when it no longer does, back to spot when safe; "
         "a deadline that not even on-demand can keep is refused at submit with the earliest "
         "possible finish."),
    KOPT("checkpoint_every", SL_OPT_INT, 0, 0, "auto", "STEPS|auto", "auto", CTX_RESOURCE,
         "checkpoint interval",
         "How often the job saves a checkpoint; auto picks an interval from the instance's "
         "interruption rate."),
};
#undef KOPT

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* The kernel's context bits of a row of spotlab-train's table. */
static unsigned train_mask(const struct sl_opt *o) {
  static const struct {
    unsigned tc, ctx;
  } map[] = {{TC_OPT_TRAIN, CTX_TRAIN}, {TC_OPT_EVAL, CTX_EVAL}, {TC_OPT_SAMPLE, CTX_SAMPLE},
             {TC_OPT_GPT, CTX_GPT},     {TC_OPT_MLP, CTX_MLP}};
  unsigned mask = 0;
  for (size_t i = 0; i < N_OF(map); i++)
    if (o->contexts & map[i].tc)
      mask |= map[i].ctx;
  return mask;
}

/* The i-th option of the cell language (from 0) and its context bits; NULL
 * past the last. */
static const struct sl_opt *option_at(size_t i, unsigned *ret_mask) {
  for (size_t k = 0; k < tc_train_opts_n; k++) {
    unsigned mask = train_mask(&tc_train_opts[k]);
    if (mask && i-- == 0) {
      *ret_mask = mask;
      return &tc_train_opts[k];
    }
  }
  if (i >= N_OF(kernel_options))
    return NULL;
  *ret_mask = kernel_options[i].contexts;
  return &kernel_options[i];
}

static size_t n_options(void) {
  size_t n = 0;
  unsigned mask;
  while (option_at(n, &mask))
    n++;
  return n;
}

static const struct sl_opt *find_option(const char *name, unsigned *ret_mask) {
  unsigned mask;
  const struct sl_opt *o;
  for (size_t i = 0; (o = option_at(i, &mask)); i++)
    if (strcmp(o->name, name) == 0) {
      if (ret_mask)
        *ret_mask = mask;
      return o;
    }
  return NULL;
}

static const struct jk_command commands[] = {
#define JK_COMMAND(id, word, kind, stmt, args, gateway, run, complete, funcs, summary, text,     \
                   example)                                                                    \
  [JK_CMD_##id] = {word, kind, stmt, args, gateway, complete, funcs, summary, text, example},
#include "commands.def"
#undef JK_COMMAND
};

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
    unsigned mask;
    const struct sl_opt *o = option_at(i, &mask);
    if (o) {
      if (ret_kind)
        *ret_kind = JK_WORD_OPTION;
      return o->name;
    }
    c = nth_word(i - n_options(), true, &n);
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
  unsigned want = context_mask(context), mask;
  const struct sl_opt *o;
  for (size_t k = 0; want && (o = option_at(k, &mask)); k++)
    if ((mask & want) && i-- == 0)
      return o->name;
  return NULL;
}

bool jk_lang_has_option(const char *context, const char *name) {
  unsigned want = context_mask(context), mask;
  return want && find_option(name, &mask) && (mask & want);
}

const struct sl_opt *jk_lang_option_decl(const char *name) {
  return name ? find_option(name, NULL) : NULL;
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

/* An option's help, written from its declaration into bufs. */
struct option_help {
  struct help h;
  char summary[256], text[1024], example[128];
};

/* "train and eval", "gpt() and mlp()": the contexts of mask. */
static void context_words(unsigned mask, char *buf, size_t size) {
  size_t n = 0, total = 0, used = 0;
  for (size_t i = 0; i < N_OF(contexts); i++)
    total += (contexts[i].mask & mask) != 0;
  buf[0] = '\0';
  for (size_t i = 0; i < N_OF(contexts) && used < size; i++) {
    if (!(contexts[i].mask & mask))
      continue;
    bool call = contexts[i].mask & (CTX_GPT | CTX_MLP);
    const char *sep = n == 0 ? "" : n + 1 == total ? " and " : ", ";
    int k = snprintf(buf + used, size - used, "%s%s%s", sep, contexts[i].name, call ? "()" : "");
    used += k > 0 ? (size_t)k : 0;
    n++;
  }
}

/* The line of code an example shows o in, for its first context. */
static void option_example(const struct sl_opt *o, unsigned mask, char *buf, size_t size) {
  const char *v = o->example ? o->example : o->def ? o->def : sl_opt_metavar(o);
  if (mask & (CTX_TRAIN | CTX_EVAL))
    snprintf(buf, size, "%s m on d %s=%s", mask & CTX_TRAIN ? "train" : "eval", o->name, v);
  else if (mask & CTX_SAMPLE)
    snprintf(buf, size, "sample m %s=%s", o->name, v);
  else if (mask & CTX_RUN)
    snprintf(buf, size, "%%%%run %s=%s", o->name, v);
  else if (mask & CTX_INSTANCES)
    snprintf(buf, size, "%%instances %s=%s", o->name, v);
  else
    snprintf(buf, size, "model m = %s(%s=%s)", mask & CTX_GPT ? "gpt" : "mlp", o->name, v);
}

static const struct help *option_help(const char *word, struct option_help *b) {
  unsigned mask;
  const struct sl_opt *o = find_option(word, &mask);
  if (!o)
    return NULL;
  char where[160], limits[200] = "";
  context_words(mask, where, sizeof where);
  size_t used = 0;
  if (o->def)
    used += (size_t)snprintf(limits, sizeof limits, " Default: %s.", o->def);
  if ((o->min != 0 || o->max != 0) && used < sizeof limits)
    used += (size_t)snprintf(limits + used, sizeof limits - used, " %s %.15g%s %.15g%s.",
                             (o->flags & SL_OPT_ABOVE_MIN) ? "Above" : "From", o->min,
                             (o->flags & SL_OPT_ABOVE_MIN) ? ", up to" : " to", o->max,
                             o->type == SL_OPT_DUR ? " seconds" : "");
  if (o->choices && used < sizeof limits)
    snprintf(limits + used, sizeof limits - used, " Values: %s.", o->choices);
  snprintf(b->summary, sizeof b->summary, "%s=%s: %s", o->name, sl_opt_metavar(o), o->help);
  snprintf(b->text, sizeof b->text, "%s%s Option of %s.%s", o->doc ? o->doc : o->help,
           o->doc ? "" : ".", where, limits);
  size_t first = strcspn(b->text, " ");
  if (b->text[0] >= 'a' && b->text[0] <= 'z' && first && b->text[first - 1] != ':')
    b->text[0] = (char)(b->text[0] - 'a' + 'A'); /* a sentence, unless it opens "gpt: ..." */
  option_example(o, mask, b->example, sizeof b->example);
  b->h = (struct help){word, b->summary, b->text, b->example};
  return &b->h;
}

/* The help of any word: from the command table, or written from an option's
 * declaration; both into b. */
static const struct help *find_help(const char *word, struct option_help *b) {
  enum jk_cmd id;
  if (jk_lang_find_command(word, &id) == 0) {
    b->h = (struct help){commands[id].word, commands[id].summary, commands[id].text,
                         commands[id].example};
    return &b->h;
  }
  return option_help(word, b);
}

/* Returns an owned string, or NULL when out of memory. */
static char *format_help(const struct help *h, int detail_level) {
  char *out = NULL;
  size_t size = 0;
  FILE *f = open_memstream(&out, &size);
  if (!f)
    return NULL;
  fprintf(f, "%s\n\n%s\n", h->summary, h->text);
  /* a statement's or magic's options, from their declarations (the
   * functions' text names theirs) */
  unsigned mask = context_mask(h->word);
  if (mask & (CTX_RESOURCE | CTX_INSTANCES)) {
    const char *name;
    fputs("Options:", f);
    for (size_t i = 0; (name = jk_lang_option(h->word, i)); i++)
      fprintf(f, " %s", name);
    fputc('\n', f);
  }
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
  struct option_help tmp;
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
    struct option_help tmp;
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
