set output (ARGC > 0 ? ARG1 : "summary.png")
set terminal pngcairo size 1860,650 noenhanced
set title "Deletang et al. tasks (seq2seq), train lengths 1-16, test to 64: exact match (%) over the extrapolation lengths, mean and 95 % t-interval"
set datafile missing '?'
set style data histogram
set style histogram errorbars gap 1 lw 1
set style fill solid 0.7 border -1
set key outside right top
set grid ytics
set xtics rotate by -30
set ylabel "exact match (%)"
set yrange [0:105]
plot "summary.dat" using 2:3:4:xtic(1) title "sinusoidal", '' using 5:6:7 title "learned", '' using 8:9:10 title "shaw", '' using 11:12:13 title "t5", '' using 14:15:16 title "rope", '' using 17:18:19 title "alibi", '' using 20:21:22 title "none", '' using 23:24:25 title "rope+rand", '' using 26:27:28 title "rope+rand+randpos", '' using 29:30:31 title "sinusoidal+rand", '' using 32:33:34 title "sinusoidal+rand+randpos"
