// The parameter table every parallel layer takes (DDP, ZeRO, the sharded optimizer, the
// trainer): named views into one flat buffer, whatever the model (the Transformer LM's layout,
// the course's toy models).
#pragma once
#include <stddef.h>

// One parameter: a named view [offset, offset + numel) into the flat buffers. The table must
// be in increasing offset order with no overlaps (gaps — padding — are allowed).
typedef struct {
    const char* name;
    size_t offset, numel;  // elements
    int trainable;         // 0: frozen (requires_grad=False): in no bucket (only the flat
                           // variant's one slice may span it), never updated
} param_ref_t;
