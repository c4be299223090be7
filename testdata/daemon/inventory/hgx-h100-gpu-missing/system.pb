
	fakehw-41HGX H100 8-GPU (fakehw)FKH436A5D58E0D8"Intel(R) Xeon(R) Platinum 8480+(p0€€€€€@8B6.8.0-fakehwJUbuntu 24.04 LTS (fakehw)