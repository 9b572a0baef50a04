/*
 * tier_file.h - one file of the disk tier (ipc/tier.h): a KV page of one
 * page group (common/kvgroup.h: the full-attention layers' group or the
 * sliding-window layers' group; every layer of that group, K then V, as
 * the backend lays a page out) or a recurrent-state checkpoint, with a
 * header that says whose it is and what it holds, so a file from another
 * model, another KV geometry or group split, an older format, a torn write
 * or a flipped bit is recognised and never served.
 *
 * Layout (little-endian), version 2:
 *   0   "HYKVTIER"            8   u32 version (2)
 *   12  u32 kind: 0 a page of the full-attention group, 1 a checkpoint,
 *                 2 a page of the sliding-window group (the page's group)
 *   16  u64 chain hash h_i    24  i32 depth (block i; -1 for a checkpoint)
 *   28  u32 n_tokens          32  u64 payload bytes     40  u32 payload CRC-32C
 *   44  u32 header CRC-32C (over the header bytes with these 4 bytes zero)
 *   48  identity (hy_tier_ident_t: model SHA-256, model bytes, KV geometry,
 *       the sliding group's layers, window and page size)
 *   192 the block's n_tokens token ids (a page), zero padding to 64 bytes
 *   H   payload (H = hy_tier_file_header_bytes(n_tokens))
 * The file is exactly H + payload bytes.  Names are "p-<hash>.hykv",
 * "s-<hash>.hykv" (sliding group) and "c-<hash>.hykv" (16 lower-case hex
 * digits); writers go through "<name>.<n>.tmp" and rename, so a crash
 * leaves a .tmp, never a short file under a final name.  Version 1 (every
 * KV layer in one page, 144 fixed header bytes) is recognised and refused
 * by its version, not called corrupt.
 */
#ifndef HY_IPC_TIER_FILE_H
#define HY_IPC_TIER_FILE_H

#include "common/hy.h"

#define HY_TIER_FILE_VERSION 2 /* 2: page groups (sliding-window pages of their own kind) */
#define HY_TIER_FILE_FIXED 192 /* header bytes before the tokens */
#define HY_TIER_NAME_LEN 40    /* "p-" + 16 hex + ".hykv" + ".<n>.tmp" + NUL fits */

/* What an entry of the store holds: a page of the full-attention group, a
 * recurrent-state checkpoint, a page of the sliding-window group. */
enum { HY_TIER_PAGE = 0, HY_TIER_CKPT = 1, HY_TIER_SWA = 2, HY_TIER_KINDS = 3 };

/* Pages (either group) carry a block: tokens and a depth. */
static inline bool hy_tier_kind_is_page(int64_t kind)
{
    return kind == HY_TIER_PAGE || kind == HY_TIER_SWA;
}

/* What must match for a file to be served: the model file's bytes (its
 * SHA-256 and size) and the geometry of what a page and a checkpoint hold. */
typedef struct {
    uint8_t model_sha256[32];
    uint64_t model_bytes;
    uint32_t kv_type;      /* hy_dtype_t of the KV pages */
    uint32_t n_kv_layers;  /* attention layers that keep KV (both groups) */
    uint32_t n_head_kv, head_dim_k, head_dim_v;
    uint32_t n_rec_layers; /* recurrent layers in a checkpoint */
    uint32_t page_tokens;
    uint64_t page_bytes;   /* payload of a full-attention group's page file */
    uint64_t slot_bytes;   /* payload of a checkpoint file */
    uint32_t n_swa_layers; /* KV layers in the sliding-window group (0: no such group) */
    uint32_t swa_window;   /* their window in tokens */
    uint64_t swa_page_bytes; /* payload of a sliding group's page file */
    uint32_t swa_map_crc;  /* CRC-32C of the per-KV-layer group bytes (which layers slide) */
} hy_tier_ident_t;

/* The per-file part of a header. */
typedef struct {
    uint32_t kind;         /* HY_TIER_PAGE / HY_TIER_CKPT / HY_TIER_SWA */
    uint64_t hash;         /* chain hash of the prefix that ends with this block */
    int32_t depth;         /* block number of a page (0-based); -1 for a checkpoint */
    uint32_t n_tokens;     /* page_tokens for a page, 0 for a checkpoint */
    uint64_t payload_bytes;
    uint32_t payload_crc;
} hy_tier_rec_t;

/* Bytes of a header holding n_tokens tokens (a multiple of 64). */
size_t hy_tier_file_header_bytes(uint32_t n_tokens);

/* Payload bytes of a kind under id (0 for a kind that is not one). */
uint64_t hy_tier_file_unit(const hy_tier_ident_t *id, uint32_t kind);

/* "p-<hash>.hykv" / "s-<hash>.hykv" / "c-<hash>.hykv" into buf. */
void hy_tier_file_name(char *buf, size_t cap, uint32_t kind, uint64_t hash);
/* The kind and hash a final name stands for; false for anything else
 * (temporary files included). */
bool hy_tier_file_parse_name(const char *name, uint32_t *kind, uint64_t *hash);

/* Fills hdr (hy_tier_file_header_bytes(r->n_tokens) bytes) from id, r and
 * the block's tokens; r->payload_crc must already be the payload's CRC. */
void hy_tier_file_encode(uint8_t *hdr, const hy_tier_ident_t *id, const hy_tier_rec_t *r,
                         const int32_t *tokens);

/* Checks a header read from a file of file_bytes bytes against id and
 * (when want_kind/want_hash are not -1/0) the name it was found under.
 * HY_OK with r and tokens (room for id->page_tokens) filled in;
 * HY_EFORMAT corrupt or truncated; HY_EUNSUPPORTED foreign (another model,
 * geometry or format version).  why says which field, for the log line. */
int hy_tier_file_decode(const uint8_t *hdr, size_t hdr_len, uint64_t file_bytes,
                        const hy_tier_ident_t *id, int64_t want_kind, uint64_t want_hash,
                        hy_tier_rec_t *r, int32_t *tokens, char *why);

/* Reads and checks file `name` in directory dirfd: the header, the size,
 * and, when payload is not NULL, the payload (payload_cap bytes of room)
 * and its CRC.  Codes as hy_tier_file_decode, plus HY_EIO (why = the
 * system's reason) and HY_ENOENT (no such file). */
int hy_tier_file_read(int dirfd, const char *name, const hy_tier_ident_t *id,
                      hy_tier_rec_t *r, int32_t *tokens, void *payload, uint64_t payload_cap,
                      char *why);

/* Writes a whole file (header for r, then payload) as `name` in dirfd,
 * through a temporary "<name>.<tag>.tmp" renamed into place, so a file
 * under a final name is always complete.  inject: an errno to fail with
 * (fault injection), or 0.  HY_EIO with why (the temporary is removed). */
int hy_tier_file_write(int dirfd, const char *name, unsigned tag, const hy_tier_ident_t *id,
                       hy_tier_rec_t *r, const int32_t *tokens, const void *payload, int inject,
                       char *why);

#endif
