// How an expert's tokens split into token tiles; the permute stage counts the tiles (tile_offset) and the grouped
// GEMMs decode them (moe_gemm_tiles.cuh), both through these two functions.
#pragma once

namespace afd::kernels::cuda {

// Tiles of an expert holding `count` tokens: one while count <= single_tile_tokens, else ceil(count / tile_tokens).
// single_tile_tokens > tile_tokens only for shapes whose token tile holds more than a full multi-tile one (wide288:
// an expert of up to 288 tokens streams its weights once, larger ones take tiles of 256).
__device__ __forceinline__ int expertTokenTiles(int count, int tile_tokens, int single_tile_tokens) {
    if (count <= single_tile_tokens) {
        return count > 0 ? 1 : 0;
    }
    return (count + tile_tokens - 1) / tile_tokens;
}

// Token tile m of such an expert: first token (relative to the expert's first slot) and token count (>= 1).
__device__ __forceinline__ void expertTokenTile(int count, int tiles, int m, int tile_tokens, int* first, int* ntok) {
    if (tiles == 1) {
        *first = 0;
        *ntok = count;
        return;
    }
    *first = m * tile_tokens;
    *ntok = min(tile_tokens, count - m * tile_tokens);
}

}  // namespace afd::kernels::cuda
