# shellcheck shell=bash
# Tiny width: the 64-128-2 models of the paper's Figure 5; here the smoke / CI size.
: "${EMBED_DIM:=64}"    # [paper] Figure 5 tiny model, hidden 64
: "${FFN_DIM:=128}"     # [paper] Figure 5 tiny model, FFN 128
: "${HEADS:=2}"         # [paper] Figure 5 tiny model, 2 heads
