# shellcheck shell=bash
# Transformer-base width: the paper's Table 1 (WMT-17) and Table 2 (OPUS-100) models.
: "${EMBED_DIM:=512}"   # [paper] hidden size 512 (§5.1, Table 1; 1000L model also 512)
: "${FFN_DIM:=2048}"    # [paper] FFN size 2048
: "${HEADS:=8}"         # [paper] 8 attention heads
