module example.invalid/kvrec

go 1.19
