/*
 * family.c — the registry of model families: config.json's "architecture" -> its table.
 * A new family is one entry of MODEL_FAMILIES in family.h (docs/model-families.md).
 */
#include <string.h>
#include <strings.h>

#include "model/family.h"

#define FAMILY_ENTRY(name) &model_family_##name,
static const model_family_t *const FAMILIES[] = {MODEL_FAMILIES(FAMILY_ENTRY)};
#define N_FAMILIES ((int)(sizeof FAMILIES / sizeof FAMILIES[0]))

tern_status_t model_family_find(const model_family_t **fam, const model_config_t *cfg, const char *config_path) {
    const char *arch = cfg->architecture[0] ? cfg->architecture : "transformer";
    for (int i = 0; i < N_FAMILIES; i++)
        if (!strcasecmp(arch, FAMILIES[i]->name)) {
            *fam = FAMILIES[i];
            return TERN_OK;
        }
    char known[256] = "";
    for (int i = 0; i < N_FAMILIES; i++) {
        if (i) strncat(known, ", ", sizeof known - strlen(known) - 1);
        strncat(known, FAMILIES[i]->name, sizeof known - strlen(known) - 1);
    }
    *fam = NULL;
    return tern_error(TERN_ERR_UNSUPPORTED, "%s: unknown model architecture '%s' (this build knows: %s)",
                      config_path, arch, known);
}
