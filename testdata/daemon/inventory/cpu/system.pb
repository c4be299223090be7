
	fakehw-411U CPU server (fakehw)FKHB15276799354" AMD EPYC 7313P 16-Core Processor( 0€€€€€8B6.8.0-fakehwJUbuntu 24.04 LTS (fakehw)