set output (ARGC > 0 ? ARG1 : "train_loss.png")
set terminal pngcairo size 1100,620 noenhanced font 'Sans,10'
set title "Kazemnejad et al. tasks (decoder-only), train lengths 1-10, test to 2x: parity: training loss\nline: mean over n = 1–3 seeds (n per point in the .csv); band: min–max over seeds; runs stopped by their criterion end early"
set xlabel 'step'
set ylabel 'training loss (nats/token)'
set logscale y
set key outside right top
set grid
plot \
  "train_loss.dat" index 0 using 1:3:4 with filledcurves fc rgb '#1f77b4' fs transparent solid 0.2 noborder notitle, \
  "train_loss.dat" index 0 using 1:2 with lines lc rgb '#1f77b4' lw 2 title "nope", \
  "train_loss.dat" index 1 using 1:3:4 with filledcurves fc rgb '#ff7f0e' fs transparent solid 0.2 noborder notitle, \
  "train_loss.dat" index 1 using 1:2 with lines lc rgb '#ff7f0e' lw 2 title "t5", \
  "train_loss.dat" index 2 using 1:3:4 with filledcurves fc rgb '#2ca02c' fs transparent solid 0.2 noborder notitle, \
  "train_loss.dat" index 2 using 1:2 with lines lc rgb '#2ca02c' lw 2 title "alibi", \
  "train_loss.dat" index 3 using 1:3:4 with filledcurves fc rgb '#d62728' fs transparent solid 0.2 noborder notitle, \
  "train_loss.dat" index 3 using 1:2 with lines lc rgb '#d62728' lw 2 title "rope", \
  "train_loss.dat" index 4 using 1:3:4 with filledcurves fc rgb '#9467bd' fs transparent solid 0.2 noborder notitle, \
  "train_loss.dat" index 4 using 1:2 with lines lc rgb '#9467bd' lw 2 title "ape", \
  "train_loss.dat" index 5 using 1:3:4 with filledcurves fc rgb '#8c564b' fs transparent solid 0.2 noborder notitle, \
  "train_loss.dat" index 5 using 1:2 with lines lc rgb '#8c564b' lw 2 title "sinusoidal", \
  "train_loss.dat" index 6 using 1:3:4 with filledcurves fc rgb '#e377c2' fs transparent solid 0.2 noborder notitle, \
  "train_loss.dat" index 6 using 1:2 with lines lc rgb '#e377c2' lw 2 title "kerple", \
  "train_loss.dat" index 7 using 1:3:4 with filledcurves fc rgb '#7f7f7f' fs transparent solid 0.2 noborder notitle, \
  "train_loss.dat" index 7 using 1:2 with lines lc rgb '#7f7f7f' lw 2 title "fire", \
  "train_loss.dat" index 8 using 1:3:4 with filledcurves fc rgb '#bcbd22' fs transparent solid 0.2 noborder notitle, \
  "train_loss.dat" index 8 using 1:2 with lines lc rgb '#bcbd22' lw 2 title "xpos", \
  "train_loss.dat" index 9 using 1:3:4 with filledcurves fc rgb '#17becf' fs transparent solid 0.2 noborder notitle, \
  "train_loss.dat" index 9 using 1:2 with lines lc rgb '#17becf' lw 2 title "cope"
