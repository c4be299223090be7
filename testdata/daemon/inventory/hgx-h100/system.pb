
	fakehw-41HGX H100 8-GPU (fakehw)FKHB4C450BA1D3F"Intel(R) Xeon(R) Platinum 8480+(p0€€€€€@8B6.8.0-fakehwJUbuntu 24.04 LTS (fakehw)