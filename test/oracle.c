/* PLACEHOLDER */
typedef int ta_oracle_placeholder;
