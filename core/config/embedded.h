/*
 * Configuration files compiled into the library (generated at build time by embed.cmake from
 * the YAML presets in conf/models/ and conf/default.ini). Internal to the config module.
 */
#ifndef SRT_CONFIG_EMBEDDED_H
#define SRT_CONFIG_EMBEDDED_H

#include <stddef.h>

struct srt_cfg_blob {
	const char *name;   /* preset name (file stem) or "default.ini"; NULL ends a table */
	const char *origin; /* path in the source tree, for messages: "conf/models/tiny.yaml" */
	const char *data;   /* NUL-terminated text */
	size_t len;         /* bytes, without the NUL */
};

/* Model presets sorted by name, ended by an entry with name == NULL. */
extern const struct srt_cfg_blob srt_cfg_presets[];
/* Preset names in the same order, NULL-terminated (for srt_model_presets). */
extern const char *const srt_cfg_preset_names[];
/* conf/default.ini */
extern const struct srt_cfg_blob srt_cfg_default_ini;

#endif
