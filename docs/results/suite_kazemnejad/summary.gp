set output (ARGC > 0 ? ARG1 : "summary.png")
set terminal pngcairo size 1020,650 noenhanced
set title "Kazemnejad et al. tasks (decoder-only), train lengths 1-10, test to 2x: exact match (%) over the extrapolation lengths, mean and 95 % t-interval"
set datafile missing '?'
set style data histogram
set style histogram errorbars gap 1 lw 1
set style fill solid 0.7 border -1
set key outside right top
set grid ytics
set xtics rotate by -30
set ylabel "exact match (%)"
set yrange [0:105]
plot "summary.dat" using 2:3:4:xtic(1) title "nope", '' using 5:6:7 title "t5", '' using 8:9:10 title "alibi", '' using 11:12:13 title "rope", '' using 14:15:16 title "ape", '' using 17:18:19 title "sinusoidal", '' using 20:21:22 title "kerple", '' using 23:24:25 title "fire", '' using 26:27:28 title "xpos", '' using 29:30:31 title "cope"
