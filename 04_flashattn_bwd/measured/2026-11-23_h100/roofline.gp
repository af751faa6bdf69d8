# The roofline plot of roofline.md: cd to this directory, then gnuplot roofline.gp
# (terminal pngcairo; for a gnuplot without cairo, change it to png).
set terminal pngcairo size 1200,800
set output 'roofline.png'
set title 'roofline, NVIDIA H100 80GB HBM3 (measured peaks; model kernels at xl batch 4 x context 512)' noenhanced
set logscale xy
set grid xtics ytics mxtics mytics
set key left top noenhanced
set xlabel 'arithmetic intensity (FLOP/byte, compulsory traffic)'
set ylabel 'TFLOP/s'
set samples 2000
set xrange [0.027772:3825.06]
set yrange [*:3178.66]
W = 3.00667
PF = 51.1346
PB = 794.665
roof(x, P) = (x * W < P) ? x * W : P
set label 1 'not plotted (no FLOPs; see the table): embed_fwd' at graph 0.99, graph 0.02 right font ',9' noenhanced
$R0 << EOD
378.325 38.82 "gemm_qkv_f32"
287.64 42.5282 "gemm_attn_out_f32"
419.672 45.1906 "gemm_w13_f32"
393.846 48.4626 "gemm_w2_f32"
412.106 49.4991 "gemm_lm_head_f32"
0.666172 0.907198 "rmsnorm_fwd"
0.62475 0.543236 "rmsnorm_bwd"
0.746269 0.707834 "rope"
0.666667 0.920449 "swiglu_fwd"
1.1 2.17294 "swiglu_bwd"
0.834418 1.41909 "softmax_fwd"
0.500488 1.06701 "softmax_bwd"
1.9988 1.45869 "xent_fwd"
0.74985 0.823504 "xent_bwd"
0.083316 0.00184312 "embed_bwd"
0.466667 1.38213 "adamw"
0.999023 3.12942 "ws_fwd_bf16"
0.749633 2.12563 "ws_bwd_bf16"
0.499512 1.52451 "ws_fwd_f32"
0.374817 1.05055 "ws_bwd_f32"
510.008 13.7781 "flash_fwd_f32"
638.752 4.68264 "flash_bwd_f32"
EOD
$R1 << EOD
756.65 563.831 "gemm_qkv_bf16"
575.281 408.833 "gemm_attn_out_bf16"
839.344 642.983 "gemm_w13_bf16"
787.692 547.616 "gemm_w2_bf16"
824.211 688.056 "gemm_lm_head_bf16"
1016.06 255.775 "flash_fwd_bf16"
1275.02 261.939 "flash_bwd_bf16"
EOD
plot roof(x, PB) with lines lw 2 lc rgb '#e15759' title sprintf('bf16 tensor cores %.0f TFLOP/s, HBM %.0f GB/s', PB, W*1000), \
     roof(x, PF) with lines lw 2 lc rgb '#4e79a7' title sprintf('fp32 CUDA cores %.1f TFLOP/s', PF), \
     $R0 using 1:2 with points pt 7 ps 1.2 lc rgb '#4e79a7' title 'fp32 / CUDA-core kernels', \
     $R0 using 1:2:3 with labels left rotate by 30 offset char 0.6,0.4 font ',8' tc rgb '#4e79a7' noenhanced notitle, \
     $R1 using 1:2 with points pt 7 ps 1.2 lc rgb '#e15759' title 'bf16 tensor-core kernels', \
     $R1 using 1:2:3 with labels left rotate by 30 offset char 0.6,0.4 font ',8' tc rgb '#e15759' noenhanced notitle
set output
