/*
 * abi_compat.c — the TERN_1 (1.0.0) versions of the functions whose ABI changed in 1.1, for
 * programs linked against libtern 1.0 (include/tern.h, "Version and ABI").
 *
 * tern_search_params_t, tern_request_t and tern_model_info_t grew in 1.1 (tern_request_t again
 * after 1.2.0: its TERN_1.1 defaults below return 1.2.0's layout), and their defaults and
 * tern_model_info() are returned by value:
 * the caller passes storage of the size it was built with (a struct this large is returned
 * through a pointer to the caller's memory on every ABI Tern supports), so a program built
 * against 1.0.0's tern.h must get exactly 1.0.0's bytes. The TERN_1 versions below fill the
 * 1.0.0 layout (a byte image of the same size: the new layout's prefix, with struct_size the
 * 1.0.0 size), and the library reads that struct_size back as a 1.0.0 struct (api_struct_in).
 * The default (TERN_1.1) versions are the functions of those names in request.c and model.c; the version
 * script from scripts/export_map.sh puts them in TERN_1.1 and hides the names below.
 */
#include <stddef.h>
#include <string.h>

#include "batch/translator.h"

typedef struct {
    unsigned char b[SEARCH_PARAMS_SIZE_1_0];
} search_params_1_0_t;
typedef struct {
    unsigned char b[REQUEST_SIZE_1_0];
} request_1_0_t;
typedef struct {
    unsigned char b[REQUEST_SIZE_1_2];
} request_1_2_t;
typedef struct {
    unsigned char b[MODEL_INFO_SIZE_1_0];
} model_info_1_0_t;
typedef struct {
    unsigned char b[MODEL_OPTIONS_SIZE_1_0];
} model_options_1_0_t;
/* both are returned in memory (x86-64 and AArch64 return larger than 16 bytes so), as the
 * 1.0.0 structs were, whatever their members */
_Static_assert(sizeof(search_params_1_0_t) > 16 && sizeof(request_1_0_t) > 16 && sizeof(model_info_1_0_t) > 16,
               "returned in memory");
_Static_assert(sizeof(search_params_1_0_t) < sizeof(tern_search_params_t), "tern_search_params_t grew");
_Static_assert(sizeof(request_1_0_t) < sizeof(tern_request_t), "tern_request_t grew");
_Static_assert(sizeof(request_1_2_t) > 16 && sizeof(request_1_2_t) < sizeof(tern_request_t),
               "tern_request_t grew after 1.2.0 (no_sort)");
_Static_assert(sizeof(model_info_1_0_t) < sizeof(tern_model_info_t), "tern_model_info_t grew");
_Static_assert(sizeof(model_options_1_0_t) > 16, "returned in memory");
_Static_assert(sizeof(model_options_1_0_t) < sizeof(tern_model_options_t), "tern_model_options_t grew (1.2)");

search_params_1_0_t tern_search_default_params_1_0(void);
request_1_0_t tern_request_default_1_0(void);
request_1_2_t tern_request_default_1_1(void);
model_info_1_0_t tern_model_info_1_0(const tern_model_t *m);
model_options_1_0_t tern_model_default_options_1_0(void);

/* tern_model_options_t grew in 1.2 (shortlist): its TERN_1 defaults, the 1.0.0/1.1.0 layout */
model_options_1_0_t tern_model_default_options_1_0(void) {
    tern_model_options_t p = tern_model_default_options();
    model_options_1_0_t o;
    p.struct_size = sizeof o;
    memcpy(o.b, &p, sizeof o);
    return o;
}

search_params_1_0_t tern_search_default_params_1_0(void) {
    tern_search_params_t p = tern_search_default_params();
    search_params_1_0_t o;
    p.struct_size = sizeof o;
    memcpy(o.b, &p, sizeof o);
    return o;
}

request_1_0_t tern_request_default_1_0(void) {
    tern_request_t r = tern_request_default();
    request_1_0_t o;
    r.struct_size = sizeof o;
    memcpy(o.b, &r, sizeof o);
    return o;
}

/* tern_request_t grew after 1.2.0 (no_sort, beams_apart): its TERN_1.1 defaults keep 1.2.0's layout, what
 * programs built against 1.2.0's header were linked to */
request_1_2_t tern_request_default_1_1(void) {
    tern_request_t r = tern_request_default();
    request_1_2_t o;
    r.struct_size = sizeof o;
    memcpy(o.b, &r, sizeof o);
    return o;
}

model_info_1_0_t tern_model_info_1_0(const tern_model_t *m) {
    tern_model_info_t i = tern_model_info(m);
    model_info_1_0_t o;
    i.struct_size = sizeof o;
    memcpy(o.b, &i, sizeof o);
    return o;
}

/* Only the shared library has symbol versions; in libtern.a (the same objects) the directives
 * leave two extra local-looking names that nothing references. */
__asm__(".symver tern_search_default_params_1_0, tern_search_default_params@TERN_1");
__asm__(".symver tern_request_default_1_0, tern_request_default@TERN_1");
__asm__(".symver tern_request_default_1_1, tern_request_default@TERN_1.1");
__asm__(".symver tern_model_info_1_0, tern_model_info@TERN_1");
__asm__(".symver tern_model_default_options_1_0, tern_model_default_options@TERN_1");
