set output (ARGC > 0 ? ARG1 : "token_accuracy_vs_length.png")
set terminal pngcairo size 1200,700 noenhanced font 'Sans,10'
set title "Kazemnejad et al. tasks (decoder-only), train lengths 1-10, test to 2x: summation: token accuracy (%) vs task length\nmean and 95 % t-interval, n = 3 seeds, clipped to [0, 100]\npoints offset by up to ±0.3 in x (jitter) so that none hides another"
set xlabel "task length (points at the measured lengths)"
set ylabel "token accuracy (%)"
set key outside right top
set grid
set xrange [9.2:20.8]
set xtics (10, 12, 15, 20)
set yrange [-2:102]
set object 1 rect from first 9.2, graph 0 to first 10.5, graph 1 behind fc rgb '#e6e6e6' fs solid 1.0 noborder
plot \
  keyentry with boxes fc rgb '#e6e6e6' fs solid 1.0 title "training range (task lengths 1–10)", \
  "token_accuracy_vs_length.dat" index 0 using 1:2:3:4 with yerrorbars lc rgb '#1f77b4' lw 1.5 pt 7 ps 1.6 title "nope", \
  "token_accuracy_vs_length.dat" index 1 using 1:2:3:4 with yerrorbars lc rgb '#ff7f0e' lw 1.5 pt 5 ps 1.6 title "t5", \
  "token_accuracy_vs_length.dat" index 2 using 1:2:3:4 with yerrorbars lc rgb '#2ca02c' lw 1.5 pt 8 ps 1.6 title "alibi (not converged)", \
  "token_accuracy_vs_length.dat" index 3 using 1:2:3:4 with yerrorbars lc rgb '#d62728' lw 1.5 pt 10 ps 1.6 title "rope (not converged)", \
  "token_accuracy_vs_length.dat" index 4 using 1:2:3:4 with yerrorbars lc rgb '#9467bd' lw 1.5 pt 13 ps 1.6 title "ape", \
  "token_accuracy_vs_length.dat" index 5 using 1:2:3:4 with yerrorbars lc rgb '#8c564b' lw 1.5 pt 14 ps 1.6 title "sinusoidal (not converged)", \
  "token_accuracy_vs_length.dat" index 6 using 1:2:3:4 with yerrorbars lc rgb '#e377c2' lw 1.5 pt 6 ps 1.4 title "kerple (not converged)", \
  "token_accuracy_vs_length.dat" index 7 using 1:2:3:4 with yerrorbars lc rgb '#7f7f7f' lw 1.5 pt 4 ps 1.4 title "fire (not converged)", \
  "token_accuracy_vs_length.dat" index 8 using 1:2:3:4 with yerrorbars lc rgb '#bcbd22' lw 1.5 pt 8 ps 1.4 title "xpos (not converged)", \
  "token_accuracy_vs_length.dat" index 9 using 1:2:3:4 with yerrorbars lc rgb '#17becf' lw 1.5 pt 11 ps 1.4 title "cope"
