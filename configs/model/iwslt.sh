# shellcheck shell=bash
# IWSLT-14 width (the paper's Figure 6 uses IWSLT-14 De-En with small models).
: "${EMBED_DIM:=512}"   # [chosen] fairseq transformer_iwslt_de_en width
: "${FFN_DIM:=1024}"    # [chosen] fairseq transformer_iwslt_de_en FFN
: "${HEADS:=4}"         # [chosen] fairseq transformer_iwslt_de_en heads
