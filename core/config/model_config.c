/*
 * Model description loader (see model_config.h).
 *
 * Three passes over the text:
 *   0. a .json file is first checked to be JSON by jansson (no YAML-only syntax);
 *   1. libyaml events -> a table of every key path with its line and scalar text
 *      ("rope_scaling.factor", "compress_ratios[3]"). It catches syntax errors with their
 *      position, checks scalar types against the field table below (libcyaml 1.3.1 accepts
 *      "1.5" for an integer), and later turns a key name into a line for range errors.
 *   2. libcyaml loads the text into `struct mc_raw` with the schema below; it rejects unknown
 *      keys and duplicates. Its log (message + backtrace with positions) becomes our message.
 *   3. The raw values are converted to struct srt_model_config and validated.
 */
#include "config/model_config.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cyaml/cyaml.h>
#include <jansson.h>
#include <yaml.h>

#include <shadowrt/plugin.h>

#include "config/embedded.h"

#define MC_MAX_FILE (1u << 20) /* a config.json is a few KiB; refuse anything absurd */

/* ---------------------------------------------------------------------------------------- */
/* Raw document, as libcyaml loads it.                                                       */

struct mc_rope {
	char *type;
	char *rope_type;
	double factor;
	int64_t original_max_position_embeddings;
	double beta_fast;
	double beta_slow;
};

struct mc_quant {
	char *quant_method;
	char *fmt;
	char *scale_fmt;
	char *activation_scheme;
	char *expert_dtype;
	int64_t *weight_block_size;
	unsigned weight_block_size_count;
};

struct mc_raw {
	int64_t hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads;
	int64_t head_dim, qk_rope_head_dim, q_lora_rank, o_groups, o_lora_rank, sliding_window;
	int64_t *compress_ratios;
	unsigned compress_ratios_count;
	int64_t index_n_heads, index_head_dim, index_topk, vocab_size;
	int64_t n_routed_experts, num_experts_per_tok, n_shared_experts, moe_intermediate_size;
	int64_t num_hash_layers;
	char *scoring_func, *topk_method, *hidden_act, *model_type, *expert_dtype;
	bool norm_topk_prob, tie_word_embeddings;
	double routed_scaling_factor, swiglu_limit;
	int64_t hc_mult, hc_sinkhorn_iters;
	double hc_eps, rms_norm_eps, rope_theta, compress_rope_theta;
	struct mc_rope *rope_scaling;
	int64_t max_position_embeddings, num_nextn_predict_layers, bos_token_id, eos_token_id;
	struct mc_quant *quantization_config;
};

#define OPT CYAML_FLAG_OPTIONAL
static const cyaml_schema_value_t mc_i64 = {CYAML_VALUE_INT(CYAML_FLAG_DEFAULT, int64_t)};

static const cyaml_schema_field_t mc_rope_fields[] = {
	CYAML_FIELD_STRING_PTR("type", OPT | CYAML_FLAG_POINTER, struct mc_rope, type, 0, 64),
	CYAML_FIELD_STRING_PTR("rope_type", OPT | CYAML_FLAG_POINTER, struct mc_rope, rope_type, 0, 64),
	CYAML_FIELD_FLOAT("factor", OPT, struct mc_rope, factor),
	CYAML_FIELD_INT("original_max_position_embeddings", OPT, struct mc_rope,
			original_max_position_embeddings),
	CYAML_FIELD_FLOAT("beta_fast", OPT, struct mc_rope, beta_fast),
	CYAML_FIELD_FLOAT("beta_slow", OPT, struct mc_rope, beta_slow),
	/* YaRN attention-scale knobs of older DeepSeek configs; V4's reference does not use them. */
	CYAML_FIELD_IGNORE("mscale", OPT),
	CYAML_FIELD_IGNORE("mscale_all_dim", OPT),
	CYAML_FIELD_END,
};

static const cyaml_schema_field_t mc_quant_fields[] = {
	CYAML_FIELD_STRING_PTR("quant_method", OPT | CYAML_FLAG_POINTER, struct mc_quant, quant_method, 0, 64),
	CYAML_FIELD_STRING_PTR("fmt", OPT | CYAML_FLAG_POINTER, struct mc_quant, fmt, 0, 64),
	CYAML_FIELD_STRING_PTR("scale_fmt", OPT | CYAML_FLAG_POINTER, struct mc_quant, scale_fmt, 0, 64),
	CYAML_FIELD_STRING_PTR("activation_scheme", OPT | CYAML_FLAG_POINTER, struct mc_quant,
			       activation_scheme, 0, 64),
	CYAML_FIELD_STRING_PTR("expert_dtype", OPT | CYAML_FLAG_POINTER, struct mc_quant, expert_dtype, 0, 64),
	CYAML_FIELD_SEQUENCE("weight_block_size", OPT | CYAML_FLAG_POINTER, struct mc_quant,
			     weight_block_size, &mc_i64, 0, CYAML_UNLIMITED),
	CYAML_FIELD_END,
};

#define MC_INT(k) CYAML_FIELD_INT(#k, OPT, struct mc_raw, k)
#define MC_FLT(k) CYAML_FIELD_FLOAT(#k, OPT, struct mc_raw, k)
#define MC_STR(k) CYAML_FIELD_STRING_PTR(#k, OPT | CYAML_FLAG_POINTER, struct mc_raw, k, 0, 64)
static const cyaml_schema_field_t mc_fields[] = {
	MC_INT(hidden_size), MC_INT(num_hidden_layers), MC_INT(num_attention_heads),
	MC_INT(num_key_value_heads), MC_INT(head_dim), MC_INT(qk_rope_head_dim),
	MC_INT(q_lora_rank), MC_INT(o_groups), MC_INT(o_lora_rank), MC_INT(sliding_window),
	CYAML_FIELD_SEQUENCE("compress_ratios", OPT | CYAML_FLAG_POINTER, struct mc_raw,
			     compress_ratios, &mc_i64, 0, CYAML_UNLIMITED),
	MC_INT(index_n_heads), MC_INT(index_head_dim), MC_INT(index_topk), MC_INT(vocab_size),
	MC_INT(n_routed_experts), MC_INT(num_experts_per_tok), MC_INT(n_shared_experts),
	MC_INT(moe_intermediate_size), MC_INT(num_hash_layers),
	MC_STR(scoring_func), MC_STR(topk_method), MC_STR(hidden_act), MC_STR(model_type),
	MC_STR(expert_dtype),
	CYAML_FIELD_BOOL("norm_topk_prob", OPT, struct mc_raw, norm_topk_prob),
	CYAML_FIELD_BOOL("tie_word_embeddings", OPT, struct mc_raw, tie_word_embeddings),
	MC_FLT(routed_scaling_factor), MC_FLT(swiglu_limit),
	MC_INT(hc_mult), MC_INT(hc_sinkhorn_iters),
	MC_FLT(hc_eps), MC_FLT(rms_norm_eps), MC_FLT(rope_theta), MC_FLT(compress_rope_theta),
	CYAML_FIELD_MAPPING_PTR("rope_scaling", OPT | CYAML_FLAG_POINTER, struct mc_raw,
				rope_scaling, mc_rope_fields),
	MC_INT(max_position_embeddings), MC_INT(num_nextn_predict_layers),
	MC_INT(bos_token_id), MC_INT(eos_token_id),
	CYAML_FIELD_MAPPING_PTR("quantization_config", OPT | CYAML_FLAG_POINTER, struct mc_raw,
				quantization_config, mc_quant_fields),
	/* Keys of real config.json files that do not change what we compute. */
	CYAML_FIELD_IGNORE("architectures", OPT),
	CYAML_FIELD_IGNORE("auto_map", OPT),
	CYAML_FIELD_IGNORE("torch_dtype", OPT),
	CYAML_FIELD_IGNORE("dtype", OPT),
	CYAML_FIELD_IGNORE("transformers_version", OPT),
	CYAML_FIELD_IGNORE("use_cache", OPT),
	CYAML_FIELD_IGNORE("initializer_range", OPT),
	CYAML_FIELD_IGNORE("attention_bias", OPT),
	CYAML_FIELD_IGNORE("attention_dropout", OPT),
	CYAML_FIELD_IGNORE("pad_token_id", OPT),
	CYAML_FIELD_END,
};
static const cyaml_schema_value_t mc_schema = {
	CYAML_VALUE_MAPPING(CYAML_FLAG_POINTER, struct mc_raw, mc_fields),
};

/*
 * The type and presence rules of every key we read ("x[]" = each entry of sequence x).
 * Kept next to the schema: a key here must be a field there.
 */
enum mc_type { T_INT, T_FLOAT, T_BOOL, T_STR, T_SEQ, T_MAP };
struct mc_key {
	const char *path;
	enum mc_type type;
	bool required;
};
static const struct mc_key mc_keys[] = {
	{"hidden_size", T_INT, true},
	{"num_hidden_layers", T_INT, true},
	{"num_attention_heads", T_INT, true},
	{"num_key_value_heads", T_INT, true},
	{"head_dim", T_INT, true},
	{"qk_rope_head_dim", T_INT, true},
	{"q_lora_rank", T_INT, true},
	{"o_groups", T_INT, true},
	{"o_lora_rank", T_INT, true},
	{"sliding_window", T_INT, true},
	{"compress_ratios", T_SEQ, true},
	{"compress_ratios[]", T_INT, false},
	{"index_n_heads", T_INT, true},
	{"index_head_dim", T_INT, true},
	{"index_topk", T_INT, true},
	{"vocab_size", T_INT, true},
	{"n_routed_experts", T_INT, true},
	{"num_experts_per_tok", T_INT, true},
	{"n_shared_experts", T_INT, true},
	{"moe_intermediate_size", T_INT, true},
	{"num_hash_layers", T_INT, true},
	{"scoring_func", T_STR, false},
	{"topk_method", T_STR, false},
	{"hidden_act", T_STR, false},
	{"model_type", T_STR, false},
	{"expert_dtype", T_STR, false},
	{"norm_topk_prob", T_BOOL, false},
	{"tie_word_embeddings", T_BOOL, false},
	{"routed_scaling_factor", T_FLOAT, true},
	{"swiglu_limit", T_FLOAT, true},
	{"hc_mult", T_INT, true},
	{"hc_sinkhorn_iters", T_INT, true},
	{"hc_eps", T_FLOAT, true},
	{"rms_norm_eps", T_FLOAT, true},
	{"rope_theta", T_FLOAT, true},
	{"compress_rope_theta", T_FLOAT, true},
	{"rope_scaling", T_MAP, false},
	{"rope_scaling.type", T_STR, false},
	{"rope_scaling.rope_type", T_STR, false},
	{"rope_scaling.factor", T_FLOAT, false},
	{"rope_scaling.original_max_position_embeddings", T_INT, false},
	{"rope_scaling.beta_fast", T_FLOAT, false},
	{"rope_scaling.beta_slow", T_FLOAT, false},
	{"max_position_embeddings", T_INT, true},
	{"num_nextn_predict_layers", T_INT, false},
	{"bos_token_id", T_INT, false},
	{"eos_token_id", T_INT, false},
	{"quantization_config", T_MAP, false},
	{"quantization_config.quant_method", T_STR, false},
	{"quantization_config.fmt", T_STR, false},
	{"quantization_config.scale_fmt", T_STR, false},
	{"quantization_config.activation_scheme", T_STR, false},
	{"quantization_config.expert_dtype", T_STR, false},
	{"quantization_config.weight_block_size", T_SEQ, false},
	{"quantization_config.weight_block_size[]", T_INT, false},
};

/* ---------------------------------------------------------------------------------------- */
/* Pass 1: key positions.                                                                     */

enum mc_kind { K_SCALAR, K_SEQ, K_MAP, K_ALIAS };
struct mc_pos {
	char path[384];
	int line; /* 1-based line of the key (mapping values) or of the entry (sequences) */
	enum mc_kind kind;
	bool plain;     /* scalar written without quotes */
	char text[48];  /* scalar text, cut */
};
struct mc_doc {
	const char *origin;
	struct mc_pos *pos;
	size_t n, cap;
};

static const struct mc_pos *mc_find(const struct mc_doc *d, const char *path)
{
	for (size_t i = 0; i < d->n; i++)
		if (!strcmp(d->pos[i].path, path))
			return &d->pos[i];
	return NULL;
}

static int mc_line(const struct mc_doc *d, const char *path)
{
	const struct mc_pos *p = d ? mc_find(d, path) : NULL;
	return p ? p->line : 0;
}

struct mc_frame {
	bool is_map;
	bool want_key;
	int index;
	int key_line;
	char path[256];
	char key[96];
	char anchor[64];    /* the collection's anchor, "" when none */
	size_t start_nodes; /* expanded node count when it started */
};

/*
 * Size limits of a model description. Aliases are counted as what they expand to: libcyaml
 * copies an aliased subtree at every use (also under ignored keys), so a 2 KB "alias bomb"
 * expands to gigabytes. The flash config has about 150 values.
 */
#define MC_MAX_NODES 20000  /* values after alias expansion */
#define MC_MAX_ANCHORS 256

struct mc_anchor {
	char name[64];
	size_t weight; /* nodes the anchored value expands to */
};

struct mc_expand {
	size_t nodes;
	struct mc_anchor anchors[MC_MAX_ANCHORS];
	size_t n_anchors;
};

static const char *mc_event_anchor(const yaml_event_t *ev)
{
	const yaml_char_t *a = ev->type == YAML_SCALAR_EVENT	     ? ev->data.scalar.anchor
			       : ev->type == YAML_SEQUENCE_START_EVENT ? ev->data.sequence_start.anchor
			       : ev->type == YAML_MAPPING_START_EVENT  ? ev->data.mapping_start.anchor
								       : NULL;
	return (const char *)a;
}

static int mc_anchor_set(struct mc_expand *x, const char *name, size_t weight, char *msg,
			 size_t msglen)
{
	if (x->n_anchors == MC_MAX_ANCHORS) {
		snprintf(msg, msglen, "more than %d YAML anchors", MC_MAX_ANCHORS);
		return SRT_EINVAL;
	}
	struct mc_anchor *a = &x->anchors[x->n_anchors++];
	snprintf(a->name, sizeof(a->name), "%s", name);
	a->weight = weight;
	return 0;
}

/* Count one node event (and what an alias expands to); refuse past the limit. */
static int mc_count(struct mc_expand *x, const yaml_event_t *ev, char *msg, size_t msglen)
{
	const char *anchor = mc_event_anchor(ev);
	size_t w = 1;
	if (ev->type == YAML_ALIAS_EVENT) {
		w = 0;
		for (size_t i = x->n_anchors; i-- > 0;)
			if (!strcmp(x->anchors[i].name, (const char *)ev->data.alias.anchor)) {
				w = x->anchors[i].weight;
				break;
			}
	}
	x->nodes += w;
	if (x->nodes > MC_MAX_NODES) {
		snprintf(msg, msglen, "more than %d values%s: not a model description (refused "
			 "before expanding them)", MC_MAX_NODES,
			 ev->type == YAML_ALIAS_EVENT ? " once YAML aliases are expanded" : "");
		return SRT_EINVAL;
	}
	if (anchor && ev->type == YAML_SCALAR_EVENT)
		return mc_anchor_set(x, anchor, 1, msg, msglen);
	return 0;
}

static int mc_add(struct mc_doc *d, const struct mc_frame *f, const yaml_event_t *ev,
		  enum mc_kind kind, int line)
{
	if (d->n == d->cap) {
		size_t cap = d->cap ? 2 * d->cap : 64;
		struct mc_pos *p = realloc(d->pos, cap * sizeof(*p));
		if (!p)
			return SRT_ENOMEM;
		d->pos = p;
		d->cap = cap;
	}
	struct mc_pos *p = &d->pos[d->n++];
	memset(p, 0, sizeof(*p));
	if (f->is_map)
		snprintf(p->path, sizeof(p->path), "%.250s%s%.90s", f->path, f->path[0] ? "." : "",
			 f->key);
	else
		snprintf(p->path, sizeof(p->path), "%.250s[%d]", f->path, f->index);
	p->line = line;
	p->kind = kind;
	if (kind == K_SCALAR) {
		p->plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
		snprintf(p->text, sizeof(p->text), "%s", (const char *)ev->data.scalar.value);
	}
	return 0;
}

#define MC_DEPTH 8

/* Walk the document; on error *line gets the position and msg what libyaml said. */
static int mc_scan(struct mc_doc *d, const char *text, size_t len, char *msg, size_t msglen,
		   int *line)
{
	yaml_parser_t parser;
	yaml_event_t ev;
	struct mc_frame st[MC_DEPTH];
	int depth = -1, rc = 0, root_seen = 0;
	struct mc_expand *x = calloc(1, sizeof(*x));
	if (!x)
		return SRT_ENOMEM;

	*line = 0;
	if (!yaml_parser_initialize(&parser))
		return SRT_ENOMEM;
	yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
	for (;;) {
		if (!yaml_parser_parse(&parser, &ev)) {
			*line = (int)parser.problem_mark.line + 1;
			snprintf(msg, msglen, "YAML syntax error: %s%s%s",
				 parser.problem ? parser.problem : "unknown",
				 parser.context ? " " : "", parser.context ? parser.context : "");
			rc = SRT_EINVAL;
			break;
		}
		yaml_event_type_t t = ev.type;
		int ev_line = (int)ev.start_mark.line + 1;
		if (t == YAML_STREAM_END_EVENT) {
			yaml_event_delete(&ev);
			break;
		}
		if (t == YAML_SCALAR_EVENT || t == YAML_SEQUENCE_START_EVENT ||
		    t == YAML_MAPPING_START_EVENT || t == YAML_ALIAS_EVENT) {
			if ((rc = mc_count(x, &ev, msg, msglen))) {
				*line = ev_line;
				goto out_event;
			}
			if (depth < 0) {
				if (root_seen++ || t != YAML_MAPPING_START_EVENT) {
					*line = ev_line;
					snprintf(msg, msglen, "expected a mapping of keys (a JSON object) "
						 "at the top level");
					rc = SRT_EINVAL;
					yaml_event_delete(&ev);
					break;
				}
			} else {
				struct mc_frame *f = &st[depth];
				if (f->is_map && f->want_key) {
					if (t != YAML_SCALAR_EVENT) {
						*line = ev_line;
						snprintf(msg, msglen, "a key must be a plain string");
						rc = SRT_EINVAL;
						yaml_event_delete(&ev);
						break;
					}
					snprintf(f->key, sizeof(f->key), "%s",
						 (const char *)ev.data.scalar.value);
					f->key_line = ev_line;
					f->want_key = false;
					yaml_event_delete(&ev);
					continue;
				}
				enum mc_kind k = t == YAML_SCALAR_EVENT	       ? K_SCALAR
						 : t == YAML_SEQUENCE_START_EVENT ? K_SEQ
						 : t == YAML_MAPPING_START_EVENT  ? K_MAP
										  : K_ALIAS;
				rc = mc_add(d, f, &ev, k, f->is_map ? f->key_line : ev_line);
				if (rc)
					goto out_event;
				if (f->is_map)
					f->want_key = true;
				else
					f->index++;
			}
			if (t == YAML_SEQUENCE_START_EVENT || t == YAML_MAPPING_START_EVENT) {
				if (depth + 1 >= MC_DEPTH) {
					*line = ev_line;
					snprintf(msg, msglen, "nesting deeper than %d levels", MC_DEPTH);
					rc = SRT_EINVAL;
					goto out_event;
				}
				struct mc_frame *n = &st[depth + 1];
				memset(n, 0, sizeof(*n));
				n->is_map = t == YAML_MAPPING_START_EVENT;
				n->want_key = true;
				if (mc_event_anchor(&ev))
					snprintf(n->anchor, sizeof(n->anchor), "%s", mc_event_anchor(&ev));
				n->start_nodes = x->nodes;
				if (depth >= 0)
					snprintf(n->path, sizeof(n->path), "%.250s", d->pos[d->n - 1].path);
				depth++;
			}
		} else if (t == YAML_SEQUENCE_END_EVENT || t == YAML_MAPPING_END_EVENT) {
			if (depth >= 0 && st[depth].anchor[0] &&
			    (rc = mc_anchor_set(x, st[depth].anchor,
						x->nodes - st[depth].start_nodes + 1, msg, msglen))) {
				*line = ev_line;
				goto out_event;
			}
			depth--;
		}
		yaml_event_delete(&ev);
		continue;
out_event:
		yaml_event_delete(&ev);
		break;
	}
	yaml_parser_delete(&parser);
	free(x);
	return rc;
}

/* "compress_ratios[3]" -> "compress_ratios[]" for the key table. */
static const struct mc_key *mc_key_of(const char *path)
{
	char generic[256];
	size_t o = 0;
	for (const char *s = path; *s && o + 1 < sizeof(generic); s++) {
		generic[o++] = *s;
		if (*s == '[') {
			while (s[1] && s[1] != ']')
				s++;
		}
	}
	generic[o] = 0;
	for (size_t i = 0; i < sizeof(mc_keys) / sizeof(mc_keys[0]); i++)
		if (!strcmp(mc_keys[i].path, generic))
			return &mc_keys[i];
	return NULL;
}

static bool mc_is_int(const char *s)
{
	if (*s == '-' || *s == '+')
		s++;
	if (!*s)
		return false;
	for (; *s; s++)
		if (*s < '0' || *s > '9')
			return false;
	return true;
}

static bool mc_is_float(const char *s)
{
	char *end;
	if (!*s)
		return false;
	errno = 0;
	(void)strtod(s, &end);
	return *end == 0 && errno == 0;
}

static bool mc_is_bool(const char *s)
{
	return !strcmp(s, "true") || !strcmp(s, "false") || !strcmp(s, "True") ||
	       !strcmp(s, "False");
}

static const char *mc_type_name(enum mc_type t)
{
	switch (t) {
	case T_INT: return "an integer";
	case T_FLOAT: return "a number";
	case T_BOOL: return "true or false";
	case T_STR: return "a string";
	case T_SEQ: return "a list";
	case T_MAP: return "a mapping";
	}
	return "?";
}

/* Type of every known key's value; unknown keys are left to libcyaml. */
static int mc_check_types(const struct mc_doc *d, char *err, size_t errlen)
{
	for (size_t i = 0; i < d->n; i++) {
		const struct mc_pos *p = &d->pos[i];
		const struct mc_key *k = mc_key_of(p->path);
		if (!k)
			continue;
		bool ok;
		const char *got = p->kind == K_SEQ ? "a list" : p->kind == K_MAP ? "a mapping"
				: p->kind == K_ALIAS ? "an alias" : NULL;
		switch (k->type) {
		case T_SEQ: ok = p->kind == K_SEQ; break;
		case T_MAP: ok = p->kind == K_MAP; break;
		case T_STR: ok = p->kind == K_SCALAR; break;
		case T_INT: ok = p->kind == K_SCALAR && p->plain && mc_is_int(p->text); break;
		case T_FLOAT: ok = p->kind == K_SCALAR && p->plain && mc_is_float(p->text); break;
		case T_BOOL: ok = p->kind == K_SCALAR && p->plain && mc_is_bool(p->text); break;
		default: ok = false;
		}
		if (ok)
			continue;
		if (got)
			snprintf(err, errlen, "%s:%d: key '%s': expected %s, got %s", d->origin,
				 p->line, p->path, mc_type_name(k->type), got);
		else
			snprintf(err, errlen, "%s:%d: key '%s': expected %s, got %s'%s'", d->origin,
				 p->line, p->path, mc_type_name(k->type),
				 p->plain ? "" : "the quoted string ", p->text);
		return SRT_EINVAL;
	}
	for (size_t i = 0; i < sizeof(mc_keys) / sizeof(mc_keys[0]); i++) {
		const struct mc_key *k = &mc_keys[i];
		if (k->required && !mc_find(d, k->path)) {
			snprintf(err, errlen, "%s: missing key '%s' (%s; every DeepSeek-V4 "
				 "config.json has it)", d->origin, k->path, mc_type_name(k->type));
			return SRT_EINVAL;
		}
	}
	return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Pass 2: libcyaml, with its log captured.                                                   */

struct mc_log {
	char buf[1024];
	size_t len;
};

static void mc_log_fn(cyaml_log_t level, void *ctx, const char *fmt, va_list args)
{
	struct mc_log *l = ctx;
	if (level < CYAML_LOG_ERROR || l->len + 1 >= sizeof(l->buf))
		return;
	int n = vsnprintf(l->buf + l->len, sizeof(l->buf) - l->len, fmt, args);
	if (n > 0)
		l->len = l->len + (size_t)n < sizeof(l->buf) ? l->len + (size_t)n : sizeof(l->buf) - 1;
}

/*
 * Turn libcyaml's log into one message. The log is:
 *   "Load: <message>\nLoad: Backtrace:\n  in mapping field 'k' (line: L, column: C)\n..."
 * innermost frame first.
 */
static void mc_cyaml_message(const struct mc_doc *d, const struct mc_log *log, cyaml_err_t e,
			     char *err, size_t errlen)
{
	char first[256] = "";
	char path[256] = "";
	int line = 0;
	const char *s = log->buf;
	const char *nl = strchr(s, '\n');
	size_t n = nl ? (size_t)(nl - s) : strlen(s);
	if (!strncmp(s, "Load: ", 6)) {
		s += 6;
		n -= 6;
	}
	snprintf(first, sizeof(first), "%.*s", (int)n, s);
	/* Collect frames, then build the path outermost first. */
	const char *frames[MC_DEPTH];
	int nf = 0;
	for (const char *p = strstr(log->buf, "  in "); p && nf < MC_DEPTH; p = strstr(p + 1, "  in "))
		frames[nf++] = p + 5;
	for (int i = nf - 1; i >= 0; i--) {
		char name[96];
		unsigned idx;
		if (sscanf(frames[i], "mapping field '%95[^']'", name) == 1)
			snprintf(path + strlen(path), sizeof(path) - strlen(path), "%s%s",
				 path[0] ? "." : "", name);
		else if (sscanf(frames[i], "sequence entry '%u'", &idx) == 1)
			snprintf(path + strlen(path), sizeof(path) - strlen(path), "[%u]", idx);
		if (i == 0) {
			const char *l = strstr(frames[i], "(line: ");
			if (l)
				line = atoi(l + 7);
		}
	}
	const char *key = strstr(first, "Unexpected key: ");
	if (key) {
		char full[384];
		key += strlen("Unexpected key: ");
		snprintf(full, sizeof(full), "%s%s%s", path, path[0] ? "." : "", key);
		int kl = mc_line(d, full);
		snprintf(err, errlen, "%s:%d: key '%s': unknown key (not a DeepSeek-V4 config.json "
			 "key; see conf/models/deepseek-v4-flash.yaml for the accepted keys)",
			 d->origin, kl ? kl : line, full);
		return;
	}
	key = strstr(first, "Mapping field already seen: ");
	if (key) {
		key += strlen("Mapping field already seen: ");
		snprintf(err, errlen, "%s:%d: key '%s': given twice", d->origin, line,
			 path[0] ? path : key);
		return;
	}
	if (path[0]) {
		int kl = mc_line(d, path);
		snprintf(err, errlen, "%s:%d: key '%s': %s", d->origin, kl ? kl : line, path,
			 first[0] ? first : cyaml_strerror(e));
	} else {
		snprintf(err, errlen, "%s:%d: %s", d->origin, line,
			 first[0] ? first : cyaml_strerror(e));
	}
}

/* ---------------------------------------------------------------------------------------- */
/* Pass 3: convert and validate.                                                              */

/* Copy a 64-bit value into an int32 field, or say it does not fit. */
static int mc_i32(const char *key, int64_t v, int32_t *out, char *k, size_t kl, char *m, size_t ml)
{
	if (v < INT32_MIN || v > INT32_MAX) {
		snprintf(k, kl, "%s", key);
		snprintf(m, ml, "value %lld does not fit in 32 bits", (long long)v);
		return SRT_EINVAL;
	}
	*out = (int32_t)v;
	return 0;
}

static bool is_pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

/* Fails with `key` and a message; the caller adds file and line. */
#define FAIL(kname, ...)                                                                       \
	do {                                                                                   \
		snprintf(key, keylen, "%s", kname);                                            \
		snprintf(msg, msglen, __VA_ARGS__);                                            \
		return SRT_EINVAL;                                                             \
	} while (0)

/*
 * Upper bounds: what a config may say is bounded by what can exist, so that no size taken
 * from a file makes the loader allocate terabytes or a loop run for hours. Each width is at
 * least 8x the largest released model's (DeepSeek-V4-Pro: hidden 7168, 128 heads, 384
 * experts, vocab 129280, 1M context); their products cannot overflow 64 bits, and the total
 * weight count is checked as a whole below.
 */
#define MC_MAX_WIDTH (1 << 16)     /* hidden_size, LoRA ranks, expert width */
#define MC_MAX_HEADS 1024          /* attention and indexer heads */
#define MC_MAX_HEAD_DIM 4096       /* head_dim, index_head_dim */
#define MC_MAX_VOCAB (1 << 24)     /* 16M token ids */
#define MC_MAX_EXPERTS 4096        /* routed experts per layer */
#define MC_MAX_SHARED 64           /* shared experts per layer */
#define MC_MAX_MTP 16              /* multi-token-prediction blocks */
#define MC_MAX_SINKHORN 1000       /* Sinkhorn iterations per token and layer (V4: 20) */
#define MC_MAX_CONTEXT (1LL << 24) /* max_position_embeddings: 16M (= the trace limit) */
/* Routed expert matrices in the whole model (layers x experts): 8x Pro's 62 x 384. */
#define MC_MAX_EXPERT_MATS (1LL << 18)
/* Weights in the whole model (parameters): 2^43 = 8.8T, 5x Pro's 1.6T. */
#define MC_MAX_PARAMS (1LL << 43)

static int mc_check_bounds(const struct srt_model_config *c, char *key, size_t keylen,
			   char *msg, size_t msglen)
{
	static const struct {
		const char *key;
		size_t off;
		int64_t max;
		const char *what;
	} caps[] = {
#define CAP(f, m, w) {#f, offsetof(struct srt_model_config, f), m, w}
		CAP(hidden_size, MC_MAX_WIDTH, "model width"),
		CAP(num_attention_heads, MC_MAX_HEADS, "attention heads"),
		CAP(head_dim, MC_MAX_HEAD_DIM, "head width"),
		CAP(q_lora_rank, MC_MAX_WIDTH, "query LoRA rank"),
		CAP(o_lora_rank, MC_MAX_WIDTH, "output LoRA rank"),
		CAP(index_n_heads, MC_MAX_HEADS, "indexer heads"),
		CAP(index_head_dim, MC_MAX_HEAD_DIM, "indexer head width"),
		CAP(vocab_size, MC_MAX_VOCAB, "token ids"),
		CAP(n_routed_experts, MC_MAX_EXPERTS, "routed experts per layer"),
		CAP(n_shared_experts, MC_MAX_SHARED, "shared experts per layer"),
		CAP(moe_intermediate_size, MC_MAX_WIDTH, "expert width"),
		CAP(num_nextn_predict_layers, MC_MAX_MTP, "MTP blocks"),
		CAP(hc_sinkhorn_iters, MC_MAX_SINKHORN, "Sinkhorn iterations per token and layer"),
#undef CAP
	};
	for (size_t i = 0; i < sizeof(caps) / sizeof(caps[0]); i++) {
		int32_t v;
		memcpy(&v, (const char *)c + caps[i].off, sizeof(v));
		if (v > caps[i].max)
			FAIL(caps[i].key, "%d %s is more than the limit of %lld (8x the largest "
			     "released model; no checkpoint of this size can exist)", v,
			     caps[i].what, (long long)caps[i].max);
	}
	if (c->max_position_embeddings > MC_MAX_CONTEXT)
		FAIL("max_position_embeddings", "%lld tokens is more than the limit of %lld",
		     (long long)c->max_position_embeddings, MC_MAX_CONTEXT);
	if (c->rope_original_max_position > c->max_position_embeddings)
		FAIL("rope_scaling.original_max_position_embeddings", "%lld is more than "
		     "max_position_embeddings (%lld)", (long long)c->rope_original_max_position,
		     (long long)c->max_position_embeddings);
	if (c->sliding_window > c->max_position_embeddings)
		FAIL("sliding_window", "%d tokens is more than max_position_embeddings (%lld)",
		     c->sliding_window, (long long)c->max_position_embeddings);
	if (c->index_topk > c->max_position_embeddings)
		FAIL("index_topk", "%d is more than max_position_embeddings (%lld)", c->index_topk,
		     (long long)c->max_position_embeddings);
	for (int i = 0; i < c->n_compress_ratios; i++)
		if (c->compress_ratios[i] > c->max_position_embeddings) {
			char k[48];
			snprintf(k, sizeof(k), "compress_ratios[%d]", i);
			FAIL(k, "ratio %d is more than max_position_embeddings (%lld)",
			     c->compress_ratios[i], (long long)c->max_position_embeddings);
		}
	/* Non-finite or absurd real numbers (NaN passes no comparison; inf passes "> 0"). */
	static const struct {
		const char *key;
		size_t off;
		double max;
	} reals[] = {
		{"routed_scaling_factor", offsetof(struct srt_model_config, routed_scaling_factor), 1e6},
		{"swiglu_limit", offsetof(struct srt_model_config, swiglu_limit), 1e9},
		{"rope_theta", offsetof(struct srt_model_config, rope_theta), 1e12},
		{"compress_rope_theta", offsetof(struct srt_model_config, compress_rope_theta), 1e12},
		{"rope_scaling.factor", offsetof(struct srt_model_config, rope_factor), 1e6},
		{"rope_scaling.beta_fast", offsetof(struct srt_model_config, rope_beta_fast), 1e6},
	};
	for (size_t i = 0; i < sizeof(reals) / sizeof(reals[0]); i++) {
		double v;
		memcpy(&v, (const char *)c + reals[i].off, sizeof(v));
		if (!isfinite(v) || v > reals[i].max)
			FAIL(reals[i].key, "%g is not a finite number up to %g", v, reals[i].max);
	}
	/* The model as a whole: per-field bounds still allow products no machine holds. */
	int64_t layers = (int64_t)c->num_hidden_layers + c->num_nextn_predict_layers;
	if (layers * c->n_routed_experts > MC_MAX_EXPERT_MATS)
		FAIL("n_routed_experts", "%d experts x %lld layers = %lld expert blocks is more than "
		     "the limit of %lld", c->n_routed_experts, (long long)layers,
		     (long long)(layers * c->n_routed_experts), MC_MAX_EXPERT_MATS);
	int64_t h = c->hidden_size;
	int64_t per_layer = 3 * h * c->moe_intermediate_size *
			    ((int64_t)c->n_routed_experts + c->n_shared_experts) +
			    h * c->q_lora_rank +
			    (int64_t)c->q_lora_rank * c->num_attention_heads * c->head_dim +
			    2 * h * c->head_dim +
			    (int64_t)c->num_attention_heads * c->head_dim * c->o_lora_rank / c->o_groups +
			    (int64_t)c->o_groups * c->o_lora_rank * h;
	int64_t params = layers * per_layer + 2 * h * c->vocab_size;
	if (params > MC_MAX_PARAMS)
		FAIL("hidden_size", "these sizes make %.3g weights (%lld layers x %.3g + embeddings), "
		     "more than the limit of %.3g", (double)params, (long long)layers,
		     (double)per_layer, (double)MC_MAX_PARAMS);
	return 0;
}

static int mc_check(const struct srt_model_config *c, char *key, size_t keylen, char *msg,
		    size_t msglen)
{
	if (c->hidden_size <= 0 || c->hidden_size % 128)
		FAIL("hidden_size", "%d is not a positive multiple of 128 (the FP8 weight block)",
		     c->hidden_size);
	if (c->num_hidden_layers < 1)
		FAIL("num_hidden_layers", "%d: need at least 1 layer", c->num_hidden_layers);
	if (c->num_nextn_predict_layers < 0)
		FAIL("num_nextn_predict_layers", "%d is negative", c->num_nextn_predict_layers);
	if ((int64_t)c->num_hidden_layers + c->num_nextn_predict_layers > SRT_MAX_LAYERS)
		FAIL("num_hidden_layers", "%d + %d MTP layers exceeds the limit of %d layers",
		     c->num_hidden_layers, c->num_nextn_predict_layers, SRT_MAX_LAYERS);
	if (c->num_attention_heads < 1)
		FAIL("num_attention_heads", "%d: need at least 1 head", c->num_attention_heads);
	if (c->num_key_value_heads != 1)
		FAIL("num_key_value_heads", "%d: DeepSeek-V4 attention shares one K=V head "
		     "(expected 1)", c->num_key_value_heads);
	if (c->qk_rope_head_dim <= 0 || c->qk_rope_head_dim % 2)
		FAIL("qk_rope_head_dim", "%d is not a positive even number", c->qk_rope_head_dim);
	if (c->head_dim <= c->qk_rope_head_dim || (c->head_dim - c->qk_rope_head_dim) % 64)
		FAIL("head_dim", "head_dim %d - qk_rope_head_dim %d = %d is not a positive multiple "
		     "of 64 (the FP8 KV block)", c->head_dim, c->qk_rope_head_dim,
		     c->head_dim - c->qk_rope_head_dim);
	if (c->q_lora_rank <= 0 || c->q_lora_rank % 128)
		FAIL("q_lora_rank", "%d is not a positive multiple of 128", c->q_lora_rank);
	if (c->o_groups < 1 || c->num_attention_heads % c->o_groups)
		FAIL("o_groups", "%d does not divide num_attention_heads (%d)", c->o_groups,
		     c->num_attention_heads);
	if ((int64_t)c->num_attention_heads * c->head_dim / c->o_groups % 128)
		FAIL("o_groups", "each group's width num_attention_heads*head_dim/o_groups = %lld "
		     "is not a multiple of 128",
		     (long long)c->num_attention_heads * c->head_dim / c->o_groups);
	if (c->o_lora_rank <= 0 || c->o_lora_rank % 128)
		FAIL("o_lora_rank", "%d is not a positive multiple of 128", c->o_lora_rank);
	if (c->sliding_window < 1)
		FAIL("sliding_window", "%d: need a window of at least 1 token", c->sliding_window);
	int32_t want = c->num_hidden_layers + c->num_nextn_predict_layers;
	if (c->n_compress_ratios != want)
		FAIL("compress_ratios", "has %d entries, expected num_hidden_layers (%d) + "
		     "num_nextn_predict_layers (%d) = %d", c->n_compress_ratios,
		     c->num_hidden_layers, c->num_nextn_predict_layers, want);
	int any_csa = 0;
	for (int i = 0; i < c->n_compress_ratios; i++) {
		int32_t r = c->compress_ratios[i];
		if (r != 0 && !is_pow2(r)) {
			char k[48];
			snprintf(k, sizeof(k), "compress_ratios[%d]", i);
			FAIL(k, "ratio %d of layer %d is neither 0 (window only) nor a positive "
			     "power of two", r, i);
		}
		if (r == 4)
			any_csa = 1;
	}
	if (c->index_n_heads < 1)
		FAIL("index_n_heads", "%d: need at least 1 indexer head", c->index_n_heads);
	if (!is_pow2(c->index_head_dim) || c->index_head_dim <= c->qk_rope_head_dim)
		FAIL("index_head_dim", "%d is not a power of two larger than qk_rope_head_dim (%d) "
		     "(the indexer's Hadamard rotation needs a power of two)", c->index_head_dim,
		     c->qk_rope_head_dim);
	if (c->index_head_dim % 32)
		FAIL("index_head_dim", "%d is not a multiple of 32 (the FP4 indexer block)",
		     c->index_head_dim);
	if (c->index_topk < 1)
		FAIL("index_topk", "%d: need at least 1", c->index_topk);
	(void)any_csa;
	if (c->vocab_size < 2)
		FAIL("vocab_size", "%d: need at least 2 tokens", c->vocab_size);
	if (c->n_routed_experts < 1)
		FAIL("n_routed_experts", "%d: need at least 1 expert", c->n_routed_experts);
	if (c->num_experts_per_tok < 1 || c->num_experts_per_tok > c->n_routed_experts)
		FAIL("num_experts_per_tok", "%d is not in [1, n_routed_experts = %d]",
		     c->num_experts_per_tok, c->n_routed_experts);
	if (c->n_shared_experts < 0)
		FAIL("n_shared_experts", "%d is negative", c->n_shared_experts);
	if (c->moe_intermediate_size <= 0 || c->moe_intermediate_size % 128)
		FAIL("moe_intermediate_size", "%d is not a positive multiple of 128",
		     c->moe_intermediate_size);
	if (c->num_hash_layers < 0 || c->num_hash_layers > c->num_hidden_layers)
		FAIL("num_hash_layers", "%d is not in [0, num_hidden_layers = %d]",
		     c->num_hash_layers, c->num_hidden_layers);
	if (!(c->routed_scaling_factor > 0))
		FAIL("routed_scaling_factor", "%g is not positive", c->routed_scaling_factor);
	if (!(c->swiglu_limit >= 0))
		FAIL("swiglu_limit", "%g is negative (0 = no clamp)", c->swiglu_limit);
	if (c->hc_mult < 1 || c->hc_mult > 16)
		FAIL("hc_mult", "%d residual streams is not in [1, 16]", c->hc_mult);
	if (c->hc_sinkhorn_iters < 1)
		FAIL("hc_sinkhorn_iters", "%d: need at least 1 Sinkhorn iteration",
		     c->hc_sinkhorn_iters);
	if (!(c->hc_eps > 0 && c->hc_eps < 1))
		FAIL("hc_eps", "%g is not in (0, 1)", c->hc_eps);
	if (!(c->rms_norm_eps > 0 && c->rms_norm_eps < 1))
		FAIL("rms_norm_eps", "%g is not in (0, 1)", c->rms_norm_eps);
	if (!(c->rope_theta > 0))
		FAIL("rope_theta", "%g is not positive", c->rope_theta);
	if (!(c->compress_rope_theta > 0))
		FAIL("compress_rope_theta", "%g is not positive", c->compress_rope_theta);
	if (c->rope_factor > 1) {
		if (c->rope_original_max_position < 1)
			FAIL("rope_scaling.original_max_position_embeddings",
			     "%lld is not positive", (long long)c->rope_original_max_position);
		if (!(c->rope_beta_fast > c->rope_beta_slow && c->rope_beta_slow > 0))
			FAIL("rope_scaling.beta_fast", "need beta_fast (%g) > beta_slow (%g) > 0",
			     c->rope_beta_fast, c->rope_beta_slow);
	} else if (!(c->rope_factor == 1 || c->rope_factor == 0)) {
		FAIL("rope_scaling.factor", "%g is below 1 (1 or absent = no YaRN scaling)",
		     c->rope_factor);
	}
	if (c->max_position_embeddings < 1)
		FAIL("max_position_embeddings", "%lld is not positive",
		     (long long)c->max_position_embeddings);
	if (c->bos_token_id < 0 || c->bos_token_id >= c->vocab_size)
		FAIL("bos_token_id", "%d is not in [0, vocab_size = %d)", c->bos_token_id,
		     c->vocab_size);
	if (c->eos_token_id < 0 || c->eos_token_id >= c->vocab_size)
		FAIL("eos_token_id", "%d is not in [0, vocab_size = %d)", c->eos_token_id,
		     c->vocab_size);
	if (c->weight_block_size != 128)
		FAIL("quantization_config.weight_block_size", "%d: the kernels use 128x128 FP8 "
		     "weight blocks", c->weight_block_size);
	return mc_check_bounds(c, key, keylen, msg, msglen);
}

int srt_model_config_validate(const struct srt_model_config *c, char *err, size_t errlen)
{
	char key[64], msg[384];
	assert(c);
	int rc = mc_check(c, key, sizeof(key), msg, sizeof(msg));
	if (rc)
		snprintf(err, errlen, "model '%s': key '%s': %s", c->name, key, msg);
	return rc;
}

/* A string key that must have one value when present. */
static int mc_expect_str(const char *have, const char *key, const char *const *allowed, char *k,
			 size_t kl, char *m, size_t ml)
{
	if (!have)
		return 0;
	for (const char *const *a = allowed; *a; a++)
		if (!strcmp(have, *a))
			return 0;
	snprintf(k, kl, "%s", key);
	snprintf(m, ml, "'%s' is not supported (expected '%s')", have, allowed[0]);
	return SRT_EINVAL;
}

static int mc_convert(const struct mc_doc *d, const struct mc_raw *r, struct srt_model_config *c,
		      char *key, size_t keylen, char *msg, size_t msglen)
{
	int rc = 0;
#define I32(f) do { if ((rc = mc_i32(#f, r->f, &c->f, key, keylen, msg, msglen))) return rc; } while (0)
	I32(hidden_size); I32(num_hidden_layers); I32(num_attention_heads);
	I32(num_key_value_heads); I32(head_dim); I32(qk_rope_head_dim); I32(q_lora_rank);
	I32(o_groups); I32(o_lora_rank); I32(sliding_window); I32(index_n_heads);
	I32(index_head_dim); I32(index_topk); I32(vocab_size); I32(n_routed_experts);
	I32(num_experts_per_tok); I32(n_shared_experts); I32(moe_intermediate_size);
	I32(num_hash_layers); I32(hc_mult); I32(hc_sinkhorn_iters);
	I32(num_nextn_predict_layers); I32(bos_token_id); I32(eos_token_id);
#undef I32
	if (!mc_find(d, "eos_token_id"))
		c->eos_token_id = 1;
	if (r->compress_ratios_count > SRT_MAX_LAYERS)
		FAIL("compress_ratios", "has %u entries, more than the limit of %d layers",
		     r->compress_ratios_count, SRT_MAX_LAYERS);
	c->n_compress_ratios = (int32_t)r->compress_ratios_count;
	for (unsigned i = 0; i < r->compress_ratios_count; i++) {
		if (r->compress_ratios[i] < 0 || r->compress_ratios[i] > INT32_MAX) {
			char k[48];
			snprintf(k, sizeof(k), "compress_ratios[%u]", i);
			FAIL(k, "ratio %lld of layer %u is neither 0 (window only) nor a positive "
			     "power of two", (long long)r->compress_ratios[i], i);
		}
		c->compress_ratios[i] = (int32_t)r->compress_ratios[i];
	}
	c->routed_scaling_factor = r->routed_scaling_factor;
	c->swiglu_limit = r->swiglu_limit;
	c->hc_eps = r->hc_eps;
	c->rms_norm_eps = r->rms_norm_eps;
	c->rope_theta = r->rope_theta;
	c->compress_rope_theta = r->compress_rope_theta;
	c->max_position_embeddings = r->max_position_embeddings;
	c->tie_word_embeddings = r->tie_word_embeddings;

	static const char *const sqrtsoftplus[] = {"sqrtsoftplus", NULL};
	static const char *const noaux_tc[] = {"noaux_tc", NULL};
	static const char *const silu[] = {"silu", NULL};
	static const char *const v4[] = {"deepseek_v4", NULL};
	static const char *const yarn[] = {"yarn", NULL};
	static const char *const fp8[] = {"fp8", NULL};
	static const char *const e4m3[] = {"e4m3", NULL};
	static const char *const ue8m0[] = {"ue8m0", NULL};
	static const char *const dynamic[] = {"dynamic", NULL};
	static const char *const expert[] = {"fp4", "fp8", NULL};
	if ((rc = mc_expect_str(r->scoring_func, "scoring_func", sqrtsoftplus, key, keylen, msg, msglen)) ||
	    (rc = mc_expect_str(r->topk_method, "topk_method", noaux_tc, key, keylen, msg, msglen)) ||
	    (rc = mc_expect_str(r->hidden_act, "hidden_act", silu, key, keylen, msg, msglen)) ||
	    (rc = mc_expect_str(r->model_type, "model_type", v4, key, keylen, msg, msglen)) ||
	    (rc = mc_expect_str(r->expert_dtype, "expert_dtype", expert, key, keylen, msg, msglen)))
		return rc;
	if (mc_find(d, "norm_topk_prob") && !r->norm_topk_prob)
		FAIL("norm_topk_prob", "false is not supported: DeepSeek-V4 renormalises the top-k "
		     "routing weights (expected true)");
	const char *expert_dtype = r->expert_dtype;

	c->rope_factor = 1;
	if (r->rope_scaling) {
		const struct mc_rope *y = r->rope_scaling;
		if ((rc = mc_expect_str(y->type, "rope_scaling.type", yarn, key, keylen, msg, msglen)) ||
		    (rc = mc_expect_str(y->rope_type, "rope_scaling.rope_type", yarn, key, keylen, msg, msglen)))
			return rc;
		if (!mc_find(d, "rope_scaling.factor"))
			FAIL("rope_scaling", "missing key 'factor'");
		c->rope_factor = y->factor;
		c->rope_original_max_position = y->original_max_position_embeddings;
		c->rope_beta_fast = mc_find(d, "rope_scaling.beta_fast") ? y->beta_fast : 32;
		c->rope_beta_slow = mc_find(d, "rope_scaling.beta_slow") ? y->beta_slow : 1;
		if (y->factor > 1 && !mc_find(d, "rope_scaling.original_max_position_embeddings"))
			FAIL("rope_scaling", "missing key 'original_max_position_embeddings' "
			     "(needed by YaRN when factor > 1)");
	}
	c->weight_block_size = 128;
	if (r->quantization_config) {
		const struct mc_quant *q = r->quantization_config;
		if ((rc = mc_expect_str(q->quant_method, "quantization_config.quant_method", fp8, key, keylen, msg, msglen)) ||
		    (rc = mc_expect_str(q->fmt, "quantization_config.fmt", e4m3, key, keylen, msg, msglen)) ||
		    (rc = mc_expect_str(q->scale_fmt, "quantization_config.scale_fmt", ue8m0, key, keylen, msg, msglen)) ||
		    (rc = mc_expect_str(q->activation_scheme, "quantization_config.activation_scheme", dynamic, key, keylen, msg, msglen)) ||
		    (rc = mc_expect_str(q->expert_dtype, "quantization_config.expert_dtype", expert, key, keylen, msg, msglen)))
			return rc;
		if (q->expert_dtype && !expert_dtype)
			expert_dtype = q->expert_dtype;
		if (q->weight_block_size) {
			if (q->weight_block_size_count != 2 ||
			    q->weight_block_size[0] != q->weight_block_size[1])
				FAIL("quantization_config.weight_block_size", "expected two equal "
				     "block sides, e.g. [128, 128]");
			if (q->weight_block_size[0] < 0 || q->weight_block_size[0] > INT32_MAX)
				FAIL("quantization_config.weight_block_size", "%lld is out of range",
				     (long long)q->weight_block_size[0]);
			c->weight_block_size = (int32_t)q->weight_block_size[0];
		}
	}
	/* No expert_dtype = the first Flash release: experts stored like the dense weights. */
	c->expert_fp4 = expert_dtype && !strcmp(expert_dtype, "fp4");
	return 0;
}
#undef FAIL

/* ---------------------------------------------------------------------------------------- */
/* Public entry points.                                                                       */

int srt_model_config_load_text(const char *text, size_t len, const char *origin,
			       const char *name, struct srt_model_config *out, char *err,
			       size_t errlen)
{
	struct mc_doc doc = {.origin = origin ? origin : "<text>"};
	struct mc_raw *raw = NULL;
	struct mc_log log = {.len = 0};
	cyaml_config_t cfg = {
		.log_fn = mc_log_fn,
		.log_ctx = &log,
		.mem_fn = cyaml_mem,
		.log_level = CYAML_LOG_ERROR,
		.flags = CYAML_CFG_DEFAULT,
	};
	char msg[384] = "", key[64] = "";
	int line = 0, rc;

	assert(text && out);
	memset(out, 0, sizeof(*out));
	/* A .json file must be JSON (jansson: strict RFC 8259, no duplicate keys): YAML-only
	 * syntax such as anchors and aliases is refused before the YAML reader sees it. */
	size_t ol = strlen(doc.origin);
	if (ol >= 5 && !strcmp(doc.origin + ol - 5, ".json")) {
		json_error_t je;
		json_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
		if (!j) {
			snprintf(err, errlen, "%s:%d: not valid JSON: %s (column %d)", doc.origin,
				 je.line, je.text, je.column);
			return SRT_EINVAL;
		}
		json_decref(j);
	}
	rc = mc_scan(&doc, text, len, msg, sizeof(msg), &line);
	if (rc == SRT_ENOMEM) {
		snprintf(err, errlen, "%s: out of memory", doc.origin);
		goto out;
	}
	if (rc) {
		snprintf(err, errlen, "%s:%d: %s", doc.origin, line, msg);
		goto out;
	}
	rc = mc_check_types(&doc, err, errlen);
	if (rc)
		goto out;
	cyaml_err_t e = cyaml_load_data((const uint8_t *)text, len, &cfg, &mc_schema,
					(cyaml_data_t **)&raw, NULL);
	if (e != CYAML_OK) {
		mc_cyaml_message(&doc, &log, e, err, errlen);
		rc = e == CYAML_ERR_OOM ? SRT_ENOMEM : SRT_EINVAL;
		raw = NULL;
		goto out;
	}
	if (!raw) { /* cannot happen: required keys were checked above */
		snprintf(err, errlen, "%s: empty document", doc.origin);
		rc = SRT_EINVAL;
		goto out;
	}
	out->struct_size = sizeof(*out);
	snprintf(out->name, sizeof(out->name), "%s", name ? name : "model");
	rc = mc_convert(&doc, raw, out, key, sizeof(key), msg, sizeof(msg));
	if (!rc)
		rc = mc_check(out, key, sizeof(key), msg, sizeof(msg));
	if (rc) {
		int kl = mc_line(&doc, key);
		if (kl)
			snprintf(err, errlen, "%s:%d: key '%s': %s", doc.origin, kl, key, msg);
		else
			snprintf(err, errlen, "%s: key '%s': %s", doc.origin, key, msg);
	}
out:
	if (raw)
		cyaml_free(&cfg, &mc_schema, raw, 0);
	free(doc.pos);
	if (rc)
		memset(out, 0, sizeof(*out));
	return rc;
}

const char *const *srt_model_presets(void)
{
	return srt_cfg_preset_names;
}

static void mc_preset_list(char *buf, size_t len)
{
	size_t o = 0;
	buf[0] = 0;
	for (const struct srt_cfg_blob *b = srt_cfg_presets; b->name && o < len; b++) {
		int n = snprintf(buf + o, len - o, "%s%s", o ? ", " : "", b->name);
		if (n < 0)
			break;
		o += (size_t)n;
	}
}

/*
 * Read a whole file (NUL-terminated) into *text. Only a regular file of at most MC_MAX_FILE
 * bytes: it is opened without blocking (a FIFO named config.json would hang open() and read()
 * forever) and checked with fstat before anything is read.
 */
static int mc_read_file(const char *path, char **text, size_t *len, char *err, size_t errlen)
{
	char *buf = NULL;
	size_t n = 0;
	int rc = 0;
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
		return errno == ENOENT ? SRT_ENOENT : SRT_EIO;
	}
	struct stat st;
	if (fstat(fd, &st)) {
		rc = SRT_EIO;
		snprintf(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
		goto out_close;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = SRT_EINVAL;
		snprintf(err, errlen, "%s: not a regular file (a %s): not a model config", path,
			 S_ISFIFO(st.st_mode) ? "FIFO" : S_ISDIR(st.st_mode) ? "directory"
			 : S_ISCHR(st.st_mode) ? "character device" : S_ISSOCK(st.st_mode) ? "socket"
			 : "special file");
		goto out_close;
	}
	if (st.st_size > MC_MAX_FILE) {
		rc = SRT_EINVAL;
		snprintf(err, errlen, "%s: %lld bytes, larger than %u bytes: not a model config",
			 path, (long long)st.st_size, MC_MAX_FILE);
		goto out_close;
	}
	buf = malloc(MC_MAX_FILE + 1);
	if (!buf) {
		rc = SRT_ENOMEM;
		snprintf(err, errlen, "%s: out of memory", path);
		goto out_close;
	}
	for (;;) { /* the file may grow after fstat: read at most MC_MAX_FILE + 1 bytes */
		ssize_t r = read(fd, buf + n, MC_MAX_FILE + 1 - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			rc = SRT_EIO;
			snprintf(err, errlen, "%s: read error: %s", path, strerror(errno));
			goto out_free;
		}
		if (r == 0 || (n += (size_t)r) > MC_MAX_FILE)
			break;
	}
	if (n > MC_MAX_FILE) {
		rc = SRT_EINVAL;
		snprintf(err, errlen, "%s: larger than %u bytes: not a model config", path,
			 MC_MAX_FILE);
		goto out_free;
	}
	buf[n] = 0;
	*text = buf;
	*len = n;
	buf = NULL;
out_free:
	free(buf);
out_close:
	close(fd);
	return rc;
}

/* Name for out->name: the file's stem, or the directory name for .../config.json. */
static void mc_name_of(const char *path, char *name, size_t len)
{
	char tmp[4096];
	snprintf(tmp, sizeof(tmp), "%s", path);
	size_t n = strlen(tmp);
	while (n > 1 && tmp[n - 1] == '/')
		tmp[--n] = 0;
	char *base = strrchr(tmp, '/');
	base = base ? base + 1 : tmp;
	if (!strcmp(base, "config.json") && base > tmp) {
		base[-1] = 0;
		char *dir = strrchr(tmp, '/');
		snprintf(name, len, "%s", dir ? dir + 1 : tmp);
		return;
	}
	char *dot = strrchr(base, '.');
	if (dot && dot != base)
		*dot = 0;
	snprintf(name, len, "%s", base);
}

int srt_model_config_load(const char *preset_or_path, struct srt_model_config *out, char *err,
			  size_t errlen)
{
	const char *s = preset_or_path;
	char path[4096], name[64];
	char *text = NULL;
	size_t len = 0;
	struct stat st;
	int rc;

	assert(out);
	memset(out, 0, sizeof(*out));
	if (!s || !*s) {
		snprintf(err, errlen, "no model given (a preset name or a path)");
		return SRT_EINVAL;
	}
	if (!strchr(s, '/') && !strchr(s, '.')) {
		for (const struct srt_cfg_blob *b = srt_cfg_presets; b->name; b++)
			if (!strcmp(b->name, s)) {
				char origin[160];
				snprintf(origin, sizeof(origin), "%s (built in)", b->origin);
				return srt_model_config_load_text(b->data, b->len, origin, b->name,
								  out, err, errlen);
			}
		char list[512];
		mc_preset_list(list, sizeof(list));
		snprintf(err, errlen, "unknown model preset '%s' (built-in presets: %s; for a file "
			 "or checkpoint directory give a path, e.g. ./%s)", s, list, s);
		return SRT_ENOENT;
	}
	if (strlen(s) >= sizeof(path) - 16) {
		snprintf(err, errlen, "path too long: %.64s...", s);
		return SRT_EINVAL;
	}
	snprintf(path, sizeof(path), "%s", s);
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
		snprintf(path, sizeof(path), "%s%sconfig.json", s,
			 s[strlen(s) - 1] == '/' ? "" : "/");
		if (stat(path, &st) != 0) {
			snprintf(err, errlen, "%s: a directory without config.json (expected a "
				 "checkpoint directory, a .yaml/.json file or a preset name)", s);
			return SRT_ENOENT;
		}
	}
	rc = mc_read_file(path, &text, &len, err, errlen);
	if (rc)
		return rc;
	mc_name_of(path, name, sizeof(name));
	rc = srt_model_config_load_text(text, len, path, name, out, err, errlen);
	free(text);
	return rc;
}

int srt_model_layer_ratio(const struct srt_model_config *c, int layer)
{
	assert(c && layer >= 0 && layer < c->n_compress_ratios);
	return c->compress_ratios[layer];
}

int srt_model_layer_hash_routed(const struct srt_model_config *c, int layer)
{
	assert(c && layer >= 0 && layer < c->n_compress_ratios);
	return layer < c->num_hidden_layers && layer < c->num_hash_layers;
}

void srt_model_schedule_count(const struct srt_model_config *c, struct srt_model_schedule *s)
{
	assert(c && s);
	memset(s, 0, sizeof(*s));
	for (int i = 0; i < c->num_hidden_layers && i < c->n_compress_ratios; i++) {
		int r = c->compress_ratios[i];
		if (r == 0)
			s->window_only++;
		else if (r == 4)
			s->csa++;
		else if (r == 128)
			s->hca++;
		else
			s->other++;
		if (srt_model_layer_hash_routed(c, i))
			s->hash_routed++;
		else
			s->score_routed++;
	}
	s->mtp = c->num_nextn_predict_layers;
}
