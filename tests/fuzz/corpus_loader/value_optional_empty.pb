
none